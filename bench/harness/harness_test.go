package harness

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestRatioIsMedianOfRounds(t *testing.T) {
	t.Parallel()
	bare := &figure{rates: []float64{100, 50, 200}}
	gw := &figure{rates: []float64{90, 50, 100}}
	// per round: 0.9, 1.0, 0.5 → median 0.9; a ratio of medians would say 90/100 too, but a
	// round on a slow machine must not pair with a round on a fast one.
	if r := ratio(gw, bare); r != 0.9 {
		t.Errorf("ratio = %v, want 0.9", r)
	}
	if m := median([]float64{4, 1, 3, 2}); m != 2.5 {
		t.Errorf("median = %v, want 2.5", m)
	}
	if median(nil) != 0 {
		t.Error("median of nothing is not 0")
	}
}

func TestOptions(t *testing.T) {
	t.Parallel()
	for _, o := range []GatewayOptions{
		{},
		{IdemBin: "x"},
		{IdemBin: "x", SelfBin: "y", Duration: time.Millisecond},
		{IdemBin: "x", SelfBin: "y", InFlight: []int{-1}},
	} {
		if _, err := o.withDefaults(); !errors.Is(err, ErrConfig) {
			t.Errorf("%+v: %v, want ErrConfig", o, err)
		}
	}
	if _, err := (MiddlewareOptions{}).withDefaults(); !errors.Is(err, ErrConfig) {
		t.Errorf("middleware without SelfBin: %v", err)
	}
	o, err := GatewayOptions{IdemBin: "x", SelfBin: "y"}.withDefaults()
	if err != nil || o.Clients != 64 || o.Rounds != 3 || len(o.InFlight) != 3 {
		t.Errorf("defaults %+v, %v", o, err)
	}
}

func TestMainCommands(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, args := range [][]string{nil, {"frobnicate"}, {"serve-target", "--target", "nginx"}, {"gateway", "--inflight", "x"}} {
		if err := Main(ctx, args, io.Discard, io.Discard); err == nil {
			t.Errorf("Main(%q) succeeded", args)
		}
	}
	// A server stops cleanly when its context ends.
	ctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if err := Main(ctx, []string{"serve-upstream", "--listen", "127.0.0.1:0"}, io.Discard, io.Discard); err != nil {
		t.Errorf("serve-upstream: %v", err)
	}
}

func TestHelpers(t *testing.T) {
	t.Parallel()
	u, err := withParams("postgres://u@h:5432/db?sslmode=disable", map[string]string{"search_path": "s"})
	if err != nil || !strings.Contains(u, "search_path=s") || !strings.Contains(u, "sslmode=disable") {
		t.Errorf("withParams = %q, %v", u, err)
	}
	if n, err := ints("1, 2,0"); err != nil || len(n) != 2 {
		t.Errorf("ints = %v, %v", n, err)
	}
	if m := Machine(); !strings.Contains(m, "CPUs") {
		t.Errorf("Machine() = %q", m)
	}
	if l := lastLine("a\nb\n\n"); l != "b" {
		t.Errorf("lastLine = %q", l)
	}
}

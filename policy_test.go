package idem_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem"
)

func TestPolicy(t *testing.T) {
	t.Parallel()
	cases := []struct {
		status int
		policy idem.Policy
		kept   bool
	}{
		{200, nil, true}, {201, nil, true}, {400, nil, true}, {404, nil, true}, {422, nil, true},
		{401, nil, false}, {403, nil, false}, {408, nil, false}, {409, nil, false},
		{425, nil, false}, {429, nil, false}, {500, nil, false}, {503, nil, false},
		{500, idem.StoreServerErrors, true}, {502, idem.StoreServerErrors, true}, {429, idem.StoreServerErrors, false},
	}
	for _, tc := range cases {
		b := setup(t, idem.Options{Policy: tc.policy})
		var runs atomic.Int32
		res, err := b.eng.Do(context.Background(), "k", fp1, effect(&runs, tc.status, "x"))
		if err != nil || res.Kept != tc.kept || res.Response.Status != tc.status {
			t.Fatalf("status %d: %+v, %v; want kept=%v", tc.status, res, err, tc.kept)
		}
		again, err := b.eng.Do(context.Background(), "k", fp1, effect(&runs, tc.status, "x"))
		if err != nil {
			t.Fatal(err)
		}
		if want := map[bool]int32{true: 1, false: 2}[tc.kept]; runs.Load() != want || again.Replayed != tc.kept {
			t.Errorf("status %d: runs=%d replayed=%v, want runs=%d", tc.status, runs.Load(), again.Replayed, want)
		}
	}
}

// TestUncertainPolicyText checks that every policy's word reads back as the policy, that the
// former word "pin" still reads as hold, and that anything else is refused.
func TestUncertainPolicyText(t *testing.T) {
	t.Parallel()
	for _, p := range []idem.UncertainPolicy{idem.UncertainExpire, idem.UncertainRelease, idem.UncertainHold} {
		b, err := p.MarshalText()
		if err != nil {
			t.Fatalf("%d: %v", p, err)
		}
		var back idem.UncertainPolicy
		if err := back.UnmarshalText(b); err != nil || back != p {
			t.Errorf("%q read back as %v, %v; want %v", b, back, err, p)
		}
	}
	var p idem.UncertainPolicy
	if err := p.UnmarshalText([]byte("pin")); err != nil || p != idem.UncertainHold {
		t.Errorf(`"pin" read as %v, %v; want hold`, p, err)
	}
	for _, bad := range []string{"", "Hold", "forever", "0"} {
		if err := p.UnmarshalText([]byte(bad)); !errors.Is(err, idem.ErrInvalidInput) {
			t.Errorf("%q: err %v, want ErrInvalidInput", bad, err)
		}
	}
	if _, err := idem.UncertainPolicy(9).MarshalText(); !errors.Is(err, idem.ErrInvalidInput) {
		t.Errorf("unknown policy marshals: %v", err)
	}
}

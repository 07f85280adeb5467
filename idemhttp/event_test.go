package idemhttp_test

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
)

// An event's Start is when the middleware received the request, and its Duration the time
// since: both set whenever OnEvent is.
func TestEventStartAndDuration(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, idem.Options{}, idemhttp.Options{Scope: idemhttp.SingleCaller()}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(2 * time.Millisecond)
		_, _ = io.WriteString(w, "ok")
	}))
	before := time.Now()
	b.do(http.MethodPost, "/", "k", `{}`)
	b.do(http.MethodGet, "/", "", "")
	after := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.events) != 2 {
		t.Fatalf("%d events, want 2", len(b.events))
	}
	for _, ev := range b.events {
		if ev.Start.Before(before) || ev.Start.After(after) || ev.Duration <= 0 || ev.Duration > after.Sub(before) {
			t.Errorf("%s event: Start %v, Duration %v; want the request's start, between %v and %v, and a positive duration", ev.Outcome, ev.Start, ev.Duration, before, after)
		}
	}
	if ev := b.events[0]; ev.Outcome != idemhttp.OutcomeExecuted || ev.Handler < 2*time.Millisecond || ev.Handler > ev.Duration {
		t.Errorf("executed event: %s, Handler %v, Duration %v; want the handler's time within the request's", ev.Outcome, ev.Handler, ev.Duration)
	}
}

// When the handler ran but its result could not be recorded, the client has its answer and
// the event carries the runner's error (a conflict until the lease runs out follows); when it
// was recorded, the event has no error.
func TestUnrecordedResultInTheEvent(t *testing.T) {
	t.Parallel()
	storeErr := &idem.StoreError{Op: "complete", Err: errors.New("connection lost")}
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"store error", storeErr},
		{"lease lost", idem.ErrLeaseLost},
		{"recorded", nil},
	} {
		var logs bytes.Buffer
		rec, events := serveOnce(t, context.Background(), runnerFunc(func(ctx context.Context, _, _ string, fn idem.Func) (idem.Result, error) {
			resp, err := fn(ctx)
			return idem.Result{Response: resp, Executed: true, Kept: tc.err == nil}, cmp.Or(err, tc.err)
		}), slog.New(slog.NewTextHandler(&logs, nil)))
		if rec.Code != http.StatusCreated || rec.Body.String() != "made" {
			t.Errorf("%s: got %d %q, want the handler's 201", tc.name, rec.Code, rec.Body)
		}
		if len(events) != 1 || events[0].Outcome != idemhttp.OutcomeExecuted || events[0].Err != tc.err {
			t.Fatalf("%s: events %+v, want one executed event with error %v", tc.name, events, tc.err)
		}
		if warned := strings.Contains(logs.String(), "result was not stored"); warned != (tc.err != nil) {
			t.Errorf("%s: logs %q; want a warning that the result was not stored only on an error", tc.name, logs.String())
		}
	}
}

// TestMarkUncertainEventOutcome: a handler that calls MarkUncertain is reported to OnEvent as
// OutcomeUncertain (the claim is held), not as executed, whatever status it answered.
func TestMarkUncertainEventOutcome(t *testing.T) {
	t.Parallel()
	for _, status := range []int{201, 502} {
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			idemhttp.MarkUncertain(w)
			w.WriteHeader(status)
		})
		b := setup(t, nil, idem.Options{}, idemhttp.Options{Scope: idemhttp.SingleCaller()}, h)
		b.do("POST", "/", "unc-1", "x")
		if got := fmt.Sprint(b.outcomes()); got != "[uncertain]" {
			t.Errorf("status %d with MarkUncertain: events %s, want [uncertain]", status, got)
		}
	}
}

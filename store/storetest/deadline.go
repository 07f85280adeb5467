package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idem"
)

// CallsEndAtDeadline checks that calls kept waiting by the backend end at their context's
// deadline. It claims a key, then calls block(key), which must make the store's writes to that
// key wait (hold its row, or the database's write lock, from another connection) and return a
// function that lets them through. While they wait, a Reserve that would take the claim over and
// a Complete each get a 300ms deadline: each must return within 2s with an error matching
// context.DeadlineExceeded.
//
// A deadline on the client cannot take back a statement the server already has: once writes go
// through again, an interrupted call may still commit, and the engine treats its error as an
// unknown outcome. Fencing leaves three records, and the check accepts exactly those: the claim
// untouched, its completion (same token, status 200), or the takeover (a larger token, second
// attempt). Then the store must work again: a new key is claimed, and the first claim, if it
// is still there, completes.
func CallsEndAtDeadline(t *testing.T, st idem.Store, block func(key string) (release func())) {
	t.Helper()
	ctx := context.Background()
	fp := idem.Fingerprint([]byte("deadline"))
	now := time.Now()
	res, err := st.Reserve(ctx, idem.ReserveRequest{Key: "k", Fingerprint: fp, Now: now, Lease: time.Minute, TTL: time.Hour})
	if err != nil || !res.Claimed {
		t.Fatalf("claim: %v, claimed %v", err, res.Claimed)
	}
	release := block("k")
	calls := []struct {
		name string
		call func(context.Context) error
	}{
		{"Reserve (a takeover, which must wait for the row)", func(ctx context.Context) error {
			_, err := st.Reserve(ctx, idem.ReserveRequest{Key: "k", Fingerprint: fp, Now: now.Add(2 * time.Minute), Lease: time.Minute, TTL: time.Hour})
			return err
		}},
		{"Complete", func(ctx context.Context) error {
			return st.Complete(ctx, "k", res.Record.Token, idem.Response{Status: 200}, now, now.Add(time.Hour))
		}},
	}
	for _, c := range calls {
		cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		start := time.Now()
		err := c.call(cctx)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s while blocked: %v, want an error matching context.DeadlineExceeded", c.name, err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("%s took %v, its deadline was 300ms", c.name, d)
		}
	}
	release()
	time.Sleep(500 * time.Millisecond) // let an interrupted statement commit, if it will
	rec, err := st.Get(ctx, "k")
	switch {
	case err != nil:
		t.Fatalf("record after the deadlines: %v", err)
	case rec.State == idem.StateInProgress && rec.Token == res.Record.Token && rec.Attempts == 1:
	case rec.State == idem.StateCompleted && rec.Token == res.Record.Token && rec.Response != nil && rec.Response.Status == 200:
	case rec.State == idem.StateInProgress && rec.Token > res.Record.Token && rec.Attempts == 2:
	default:
		t.Fatalf("record after the deadlines: %+v, want the claim, its completion or a takeover", rec)
	}
	// The store works again: a new key is claimed and, when the claim is still the first one,
	// it completes.
	if r, err := st.Reserve(ctx, idem.ReserveRequest{Key: "after", Fingerprint: fp, Now: now, Lease: time.Minute, TTL: time.Hour}); err != nil || !r.Claimed {
		t.Fatalf("Reserve once writes go through again: %v, claimed %v", err, r.Claimed)
	}
	if rec.State == idem.StateInProgress && rec.Token == res.Record.Token {
		if err := st.Complete(ctx, "k", res.Record.Token, idem.Response{Status: 201}, now, now.Add(time.Hour)); err != nil {
			t.Fatalf("Complete once writes go through again: %v", err)
		}
	}
}

package pgstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/pgstore"
)

// The claim's wait is bounded by TxOptions.Wait (a lock_timeout set in the claim's round trip),
// and the handler's own statements run with the session's lock_timeout, given back in that
// same round trip.
func TestTxRunnerLockTimeoutAroundTheClaim(t *testing.T) {
	t.Parallel()
	st := newStore(t, pgstore.Options{})
	ctx := context.Background()
	var session string
	if err := pool(t).QueryRow(ctx, "SHOW lock_timeout").Scan(&session); err != nil {
		t.Fatal(err)
	}
	run := pgstore.NewTxRunner(st, pgstore.TxOptions{Wait: 300 * time.Millisecond})
	fp := idem.Fingerprint([]byte("lock"))
	began, hold, done := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var inside string
	var firstErr error
	go func() {
		defer close(done)
		_, firstErr = run.Do(ctx, "k", fp, func(ctx context.Context) (idem.Response, error) {
			if err := pgstore.TxFromContext(ctx).QueryRow(ctx, "SHOW lock_timeout").Scan(&inside); err != nil {
				return idem.Response{}, err
			}
			close(began)
			<-hold
			return idem.Response{Status: 201}, nil
		})
	}()
	<-began
	start := time.Now()
	_, err := run.Do(ctx, "k", fp, func(context.Context) (idem.Response, error) {
		t.Error("the duplicate ran fn while the first transaction was open")
		return idem.Response{}, nil
	})
	waited := time.Since(start)
	close(hold)
	<-done
	var ife *idem.InFlightError
	if !errors.As(err, &ife) {
		t.Errorf("duplicate: %v, want an *idem.InFlightError once TxOptions.Wait ran out", err)
	}
	if waited < 250*time.Millisecond || waited > 5*time.Second {
		t.Errorf("duplicate waited %s, want about TxOptions.Wait (300ms)", waited)
	}
	if firstErr != nil {
		t.Fatal(firstErr)
	}
	if inside != session {
		t.Errorf("the handler's transaction has lock_timeout %q, want the session's %q", inside, session)
	}
}

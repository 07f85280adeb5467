package pgstore_test

import (
	"context"
	"errors"
	"fmt"
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
	session := sessionLockTimeout(t)
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

// The completion in transaction mode leaves every indexed column as the claim wrote it, so
// PostgreSQL updates the record's row in place (a HOT update) and writes no index entry.
func TestTxRunnerCompletionIsHOT(t *testing.T) {
	t.Parallel()
	st := newStore(t, pgstore.Options{})
	ctx := context.Background()
	run := pgstore.NewTxRunner(st, pgstore.TxOptions{})
	const n = 50
	for i := range n {
		_, err := run.Do(ctx, fmt.Sprint("k", i), idem.Fingerprint([]byte("hot")), func(context.Context) (idem.Response, error) {
			return idem.Response{Status: 201, Body: []byte("ok")}, nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	// Each backend reports its counts when it goes idle, at most once a second.
	var upd, hot int64
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if err := pool(t).QueryRow(ctx, `SELECT coalesce(sum(n_tup_upd), 0), coalesce(sum(n_tup_hot_upd), 0)
			FROM pg_stat_user_tables WHERE relid = $1::regclass`, st.Table()).Scan(&upd, &hot); err != nil {
			t.Fatal(err)
		}
		if upd >= n {
			break
		}
	}
	if upd < n {
		t.Skipf("the statistics show %d of the %d completions after 10s", upd, n)
	}
	if hot < upd*9/10 {
		t.Errorf("%d of %d completions were HOT updates, want nearly all", hot, upd)
	}
}

// A key that has a row takes the second try of the claim: there too the handler runs with the
// session's lock_timeout, whether the claim took the key over or replayed it.
func TestTxRunnerLockTimeoutGivenBackAfterTakeover(t *testing.T) {
	t.Parallel()
	st := newStore(t, pgstore.Options{})
	ctx := context.Background()
	session := sessionLockTimeout(t)
	fp := idem.Fingerprint([]byte("takeover"))
	// An engine's claim whose lease and window ran out an hour ago.
	old := time.Now().Add(-time.Hour)
	if _, err := st.Reserve(ctx, idem.ReserveRequest{Key: "k", Fingerprint: fp, Now: old, Lease: time.Second, TTL: time.Second}); err != nil {
		t.Fatal(err)
	}
	run := pgstore.NewTxRunner(st, pgstore.TxOptions{Wait: 300 * time.Millisecond})
	var inside string
	res, err := run.Do(ctx, "k", fp, func(ctx context.Context) (idem.Response, error) {
		err := pgstore.TxFromContext(ctx).QueryRow(ctx, "SHOW lock_timeout").Scan(&inside)
		return idem.Response{Status: 201}, err
	})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Kept || res.Replayed {
		t.Fatalf("Do over an expired claim: %+v, want it executed and kept", res)
	}
	if inside != session {
		t.Errorf("after taking over an expired claim the handler's lock_timeout is %q, want the session's %q", inside, session)
	}
	res, err = run.Do(ctx, "k", fp, func(context.Context) (idem.Response, error) {
		t.Error("a replay ran fn")
		return idem.Response{}, nil
	})
	if err != nil || !res.Replayed {
		t.Fatalf("second Do: %+v, %v, want a replay", res, err)
	}
	// The replay's transaction is gone; the session keeps its setting.
	if after := sessionLockTimeout(t); after != session {
		t.Errorf("lock_timeout after the replay: %q, want %q", after, session)
	}
}

// sessionLockTimeout returns the lock_timeout of a connection of the shared pool, outside any
// transaction.
func sessionLockTimeout(t *testing.T) string {
	t.Helper()
	var v string
	if err := pool(t).QueryRow(context.Background(), "SHOW lock_timeout").Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

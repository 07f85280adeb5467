package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/pgstore"
	"github.com/idemkit/idem/store/storetest"
)

// The contract, linearizability included, holds with calls grouped into shared transactions.
func TestGroupCommitConformance(t *testing.T) {
	t.Parallel()
	for _, n := range []int{1, 2} {
		t.Run(fmt.Sprintf("GroupCommit=%d", n), func(t *testing.T) {
			t.Parallel()
			storetest.Run(t, func(t *testing.T) idem.Store { return newStore(t, pgstore.Options{GroupCommit: n}) })
		})
	}
}

func TestGroupCommitOptions(t *testing.T) {
	t.Parallel()
	_, err := pgstore.New(pool(t), pgstore.Options{GroupCommit: -1})
	if !errors.Is(err, idem.ErrInvalidInput) {
		t.Fatalf("GroupCommit -1: %v, want ErrInvalidInput", err)
	}
}

// Under concurrent load the calls do share transactions, and every one still gets its own
// statement's outcome: 64 goroutines claim and complete keys, a quarter of them claimed twice.
func TestGroupCommitGroupsCalls(t *testing.T) {
	t.Parallel()
	st := newStore(t, pgstore.Options{GroupCommit: 2})
	defer st.Close()
	ctx := context.Background()
	fp := idem.Fingerprint([]byte("group"))
	const goroutines, perG = 64, 40
	var claims sync.Map // key → token
	var dup, lost atomic.Int64
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range perG {
				key := fmt.Sprintf("k%d-%d", g, i)
				if i%4 == 0 {
					key = fmt.Sprintf("shared-%d", i) // every goroutine claims these too
				}
				now := time.Now()
				res, err := st.Reserve(ctx, idem.ReserveRequest{Key: key, Fingerprint: fp, Now: now, Lease: time.Minute, TTL: time.Hour})
				if err != nil {
					t.Error(err)
					return
				}
				if !res.Claimed {
					continue
				}
				if _, loaded := claims.LoadOrStore(key, res.Record.Token); loaded {
					dup.Add(1)
				}
				resp := idem.Response{Status: 201, Body: []byte(key)}
				if err := st.Complete(ctx, key, res.Record.Token, resp, now, now.Add(time.Hour)); err != nil {
					lost.Add(1)
					t.Errorf("complete %s: %v", key, err)
				}
			}
		})
	}
	wg.Wait()
	if dup.Load() != 0 || lost.Load() != 0 {
		t.Fatalf("%d keys claimed twice, %d completions failed", dup.Load(), lost.Load())
	}
	n := 0
	claims.Range(func(k, tok any) bool {
		n++
		rec, err := st.Get(ctx, k.(string))
		if err != nil || rec.State != idem.StateCompleted || rec.Token != tok.(int64) || string(rec.Response.Body) != k.(string) {
			t.Errorf("%s: %+v, %v", k, rec, err)
		}
		return true
	})
	if want := goroutines*perG*3/4 + perG/4; n != want {
		t.Errorf("%d keys claimed, want %d", n, want)
	}
	tx, calls, largest := pgstore.GroupStats(st)
	t.Logf("%d calls in %d transactions, at most %d in one", calls, tx, largest)
	if largest < 2 || tx >= calls {
		t.Errorf("calls were not grouped: %d calls in %d transactions, at most %d in one", calls, tx, largest)
	}
}

// One failing statement rolls its whole transaction back, and no call of it is told it
// succeeded, even those whose own statement ran before the failure.
func TestGroupCommitAllOrNothing(t *testing.T) {
	t.Parallel()
	st := newStore(t, pgstore.Options{GroupCommit: 1})
	defer st.Close()
	ctx := context.Background()
	if _, err := st.Pool().Exec(ctx, `CREATE FUNCTION `+testSchema+`.poison_`+tableName(st)+`() RETURNS trigger LANGUAGE plpgsql AS
		$$ BEGIN IF NEW.key LIKE '%poison%' THEN RAISE EXCEPTION 'poisoned key'; END IF; RETURN NEW; END $$`); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Pool().Exec(ctx, `CREATE TRIGGER poison BEFORE INSERT OR UPDATE ON `+st.Table()+
		` FOR EACH ROW EXECUTE FUNCTION `+testSchema+`.poison_`+tableName(st)+`()`); err != nil {
		t.Fatal(err)
	}
	fp := idem.Fingerprint([]byte("all-or-nothing"))
	now := time.Now()
	for _, keys := range [][]string{{"a", "b", "zz-poison"}, {"a-poison", "c", "d"}} {
		_, errs := pgstore.ReserveTogether(ctx, st, keys, fp, now)
		for i, err := range errs {
			if err == nil {
				t.Errorf("%v: %s succeeded in a transaction that failed", keys, keys[i])
			}
		}
		for _, k := range keys {
			if rec, err := st.Get(ctx, k); !errors.Is(err, idem.ErrNotFound) {
				t.Errorf("%v: %s was left behind: %+v, %v", keys, k, rec, err)
			}
		}
	}
	// The connection and the store still work; two claims of one key in one transaction get
	// what they would get one after the other.
	res, errs := pgstore.ReserveTogether(ctx, st, []string{"e", "e", "f"}, fp, now)
	if errs[0] != nil || errs[1] != nil || errs[2] != nil {
		t.Fatal(errs)
	}
	if !res[0].Claimed || res[1].Claimed || res[1].Record.Token != res[0].Record.Token || !res[2].Claimed {
		t.Errorf("e, e, f: %+v", res)
	}
	// A record that cannot be decoded is the error of its own call only.
	if _, err := st.Pool().Exec(ctx, `UPDATE `+st.Table()+` SET state = 2, response = '\x09'::bytea WHERE key = 'e'`); err != nil {
		t.Fatal(err)
	}
	res, errs = pgstore.ReserveTogether(ctx, st, []string{"e", "g"}, fp, now)
	if !errors.Is(errs[0], idem.ErrCorruptRecord) || errs[1] != nil || !res[1].Claimed {
		t.Errorf("corrupt e, new g: %v, %+v", errs, res)
	}
	if rec, err := st.Get(ctx, "g"); err != nil || rec.State != idem.StateInProgress {
		t.Errorf("g after its transaction: %+v, %v", rec, err)
	}
}

// Fencing holds inside a group: a completion with a stale token fails alone, with
// ErrLeaseLost, and the completion beside it in the same transaction commits.
func TestGroupCommitFencingIsPerCall(t *testing.T) {
	t.Parallel()
	st := newStore(t, pgstore.Options{GroupCommit: 1})
	ctx := context.Background()
	fp := idem.Fingerprint([]byte("fencing"))
	now := time.Now()
	res, errs := pgstore.ReserveTogether(ctx, st, []string{"a", "b"}, fp, now)
	if errs[0] != nil || errs[1] != nil || !res[0].Claimed || !res[1].Claimed {
		t.Fatal(res, errs)
	}
	// b is taken over after its lease: its first token is dead.
	over, err := st.Reserve(ctx, idem.ReserveRequest{Key: "b", Fingerprint: fp, Now: now.Add(2 * time.Minute), Lease: time.Minute, TTL: time.Hour})
	if err != nil || !over.Takeover {
		t.Fatal(over, err)
	}
	resp := idem.Response{Status: 201, Body: []byte("done")}
	errs = pgstore.CompleteTogether(ctx, st, []string{"a", "b"}, []int64{res[0].Record.Token, res[1].Record.Token}, resp, now)
	if errs[0] != nil || !errors.Is(errs[1], idem.ErrLeaseLost) {
		t.Fatalf("a with its token, b with a dead one: %v, want nil and ErrLeaseLost", errs)
	}
	if rec, err := st.Get(ctx, "a"); err != nil || rec.State != idem.StateCompleted {
		t.Errorf("a: %+v, %v, want completed", rec, err)
	}
	if rec, err := st.Get(ctx, "b"); err != nil || rec.State != idem.StateInProgress || rec.Token != over.Record.Token {
		t.Errorf("b: %+v, %v, want the takeover's claim untouched", rec, err)
	}
}

func tableName(st *pgstore.Store) string {
	t := st.Table() // "schema"."table"
	return t[len(testSchema)+4 : len(t)-1]
}

// A call stuck in a transaction that waits for a row ends at its own deadline.
func TestGroupCommitCallEndsAtDeadline(t *testing.T) {
	t.Parallel()
	st := newStore(t, pgstore.Options{GroupCommit: 2})
	defer st.Close()
	storetest.CallsEndAtDeadline(t, st, func(key string) func() { return holdRow(t, st, key) })
}

// claimAndHold claims key at now, then locks its row as holdRow does.
func claimAndHold(t *testing.T, st *pgstore.Store, key, fp string, now time.Time) (release func()) {
	t.Helper()
	if res, err := st.Reserve(context.Background(), idem.ReserveRequest{Key: key, Fingerprint: fp, Now: now, Lease: time.Minute, TTL: time.Hour}); err != nil || !res.Claimed {
		t.Fatal(res, err)
	}
	return holdRow(t, st, key)
}

// holdRow locks key's row from another transaction until the returned function is called.
func holdRow(t *testing.T, st *pgstore.Store, key string) func() {
	ctx := context.Background()
	tx, err := st.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT 1 FROM `+st.Table()+` WHERE key = $1 FOR UPDATE`, key); err != nil {
		_ = tx.Rollback(ctx)
		t.Fatal(err)
	}
	return func() { _ = tx.Rollback(ctx) }
}

// Close lets go at once of the calls waiting for a transaction (ErrClosed, which matches
// idem.ErrStoreUnavailable: nothing of theirs was sent), and waits for the transaction in
// flight, whose call gets its real outcome.
func TestGroupCommitClose(t *testing.T) {
	t.Parallel()
	st := newStore(t, pgstore.Options{GroupCommit: 1})
	ctx := context.Background()
	fp := idem.Fingerprint([]byte("close"))
	now := time.Now()
	release := claimAndHold(t, st, "held", fp, now)
	t.Cleanup(release) // also when the test fails early: the worker waits on the row, Close on it
	type outcome struct {
		res idem.Reservation
		err error
	}
	inFlight := make(chan outcome, 1)
	go func() { // a takeover: blocks the only worker on the held row
		res, err := st.Reserve(ctx, idem.ReserveRequest{Key: "held", Fingerprint: fp, Now: now.Add(2 * time.Minute), Lease: time.Minute, TTL: time.Hour})
		inFlight <- outcome{res, err}
	}()
	time.Sleep(200 * time.Millisecond)
	waiting := make(chan error, 5)
	for i := range 5 {
		go func() {
			_, err := st.Reserve(ctx, idem.ReserveRequest{Key: fmt.Sprint("waiting", i), Fingerprint: fp, Now: now, Lease: time.Minute, TTL: time.Hour})
			waiting <- err
		}()
	}
	time.Sleep(200 * time.Millisecond)
	closed := make(chan struct{})
	go func() {
		if err := st.Close(); err != nil {
			t.Error(err)
		}
		close(closed)
	}()
	for range 5 {
		select {
		case err := <-waiting:
			if !errors.Is(err, idem.ErrClosed) || !errors.Is(err, idem.ErrStoreUnavailable) {
				t.Errorf("waiting call after Close: %v, want ErrClosed", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("a waiting call did not return after Close")
		}
	}
	select {
	case <-closed:
		t.Fatal("Close returned while a transaction was in flight")
	case o := <-inFlight:
		t.Fatalf("the call in flight returned before its row was free: %+v", o)
	case <-time.After(100 * time.Millisecond):
	}
	release()
	select {
	case o := <-inFlight:
		if o.err != nil || !o.res.Claimed || !o.res.Takeover {
			t.Errorf("the call in flight: %+v, %v, want its takeover", o.res, o.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the call in flight did not end")
	}
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return")
	}
	for i := range 5 {
		if _, err := st.Get(ctx, fmt.Sprint("waiting", i)); err == nil {
			t.Errorf("waiting%d was written after Close", i)
		}
	}
	if _, err := st.Reserve(ctx, idem.ReserveRequest{Key: "later", Fingerprint: fp, Now: now, Lease: time.Minute, TTL: time.Hour}); !errors.Is(err, idem.ErrStoreUnavailable) {
		t.Errorf("Reserve after Close: %v", err)
	}
}

// A call whose context ends while it waits for a transaction is never sent.
func TestGroupCommitAbandonedCallIsNotSent(t *testing.T) {
	t.Parallel()
	st := newStore(t, pgstore.Options{GroupCommit: 1})
	ctx := context.Background()
	fp := idem.Fingerprint([]byte("abandoned"))
	now := time.Now()
	release := claimAndHold(t, st, "held", fp, now)
	done := make(chan error, 1)
	go func() { // blocks the only worker
		c, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_, err := st.Reserve(c, idem.ReserveRequest{Key: "held", Fingerprint: fp, Now: now.Add(2 * time.Minute), Lease: time.Minute, TTL: time.Hour})
		done <- err
	}()
	time.Sleep(200 * time.Millisecond)
	c, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err := st.Reserve(c, idem.ReserveRequest{Key: "abandoned", Fingerprint: fp, Now: now, Lease: time.Minute, TTL: time.Hour})
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("abandoned call: %v, want context.DeadlineExceeded", err)
	}
	release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if rec, err := st.Get(ctx, "abandoned"); !errors.Is(err, idem.ErrNotFound) {
		t.Errorf("the abandoned call was sent: %+v, %v", rec, err)
	}
}

// The engine on a group-committing store: 200 concurrent duplicates of each of 20 keys run
// each effect once, and every caller gets that effect's response.
func TestGroupCommitEngineStorm(t *testing.T) {
	t.Parallel()
	st := newStore(t, pgstore.Options{GroupCommit: 2})
	defer st.Close()
	eng, err := idem.New(st, idem.Options{})
	if err != nil {
		t.Fatal(err)
	}
	const keys, dups = 20, 200
	var effects [keys]atomic.Int64
	var wg sync.WaitGroup
	bodies := make([][dups]string, keys)
	for k := range keys {
		for d := range dups {
			wg.Go(func() {
				key := fmt.Sprint("storm-", k)
				for {
					res, err := eng.Do(context.Background(), key, idem.Fingerprint([]byte(key)), func(context.Context) (idem.Response, error) {
						n := effects[k].Add(1)
						time.Sleep(20 * time.Millisecond)
						return idem.Response{Status: 201, Body: fmt.Appendf(nil, "%s #%d", key, n)}, nil
					})
					if errors.Is(err, idem.ErrInFlight) {
						time.Sleep(5 * time.Millisecond)
						continue
					}
					if err != nil {
						t.Error(err)
						return
					}
					bodies[k][d] = string(res.Response.Body)
					return
				}
			})
		}
	}
	wg.Wait()
	for k := range keys {
		if n := effects[k].Load(); n != 1 {
			t.Errorf("key %d: %d effects, want 1", k, n)
		}
		for d := range dups {
			if want := fmt.Sprintf("storm-%d #1", k); bodies[k][d] != want {
				t.Errorf("key %d caller %d got %q, want %q", k, d, bodies[k][d], want)
			}
		}
	}
}

// A transaction stops taking calls once their responses reach 1 MiB, so a burst of large
// completions is spread over several transactions.
func TestGroupCommitBoundsBytes(t *testing.T) {
	t.Parallel()
	st := newStore(t, pgstore.Options{GroupCommit: 1})
	ctx := context.Background()
	fp := idem.Fingerprint([]byte("bytes"))
	now := time.Now()
	tokens := make([]int64, 6)
	for i := range tokens {
		res, err := st.Reserve(ctx, idem.ReserveRequest{Key: fmt.Sprint("big", i), Fingerprint: fp, Now: now, Lease: time.Minute, TTL: time.Hour})
		if err != nil || !res.Claimed {
			t.Fatal(res, err)
		}
		tokens[i] = res.Record.Token
	}
	release := claimAndHold(t, st, "held", fp, now)
	go func() {
		_, _ = st.Reserve(ctx, idem.ReserveRequest{Key: "held", Fingerprint: fp, Now: now.Add(2 * time.Minute), Lease: time.Minute, TTL: time.Hour})
	}() // occupies the worker
	time.Sleep(200 * time.Millisecond)
	body := make([]byte, 400<<10)
	errs := make(chan error, len(tokens))
	for i, tok := range tokens {
		go func() {
			errs <- st.Complete(ctx, fmt.Sprint("big", i), tok, idem.Response{Status: 200, Body: body}, now, now.Add(time.Hour))
		}()
	}
	time.Sleep(200 * time.Millisecond)
	release()
	for range tokens {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if _, _, largest := pgstore.GroupStats(st); largest != 3 {
		t.Errorf("at most %d calls in one transaction, want 3 (of 400 KiB each, until 1 MiB)", largest)
	}
}

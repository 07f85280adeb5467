// Package txtest is the conformance suite for transaction mode: the idem.Runner of a SQL
// store (pgstore, mysqlstore, sqlitestore) that runs the claim, the caller's writes and the
// completion in one database transaction.
//
// Every such store passes it unchanged: its test is a constructor and a call.
//
//	func TestTxConformance(t *testing.T) {
//		txtest.Run(t, func(t *testing.T, cfg txtest.Config) txtest.Harness { … })
//	}
//
// The constructor returns a Harness: the store's runner (built with Config.Wait), the store
// it keeps its records in, and two adapters for a business table of the constructor's own,
// one that inserts a row through the runner's transaction (which only the store's own
// TxFromContext can reach) and one that counts the committed rows. Each call makes records
// and business rows that share nothing with any other call's, so subtests run in parallel,
// and registers its cleanup with t.Cleanup; a call with Config.Attach set reopens those of an
// earlier call instead, in a child process, and cleans up nothing.
//
// # What it checks
//
// 100 concurrent duplicates make one business row and one answer, every replay byte for byte
// the first answer; an error, a rolled-back status or a panic in the function leaves neither
// row nor record and the retry executes, also when the retry was already waiting; another
// payload with the key gets idem.ErrMismatch and writes nothing, also while the first is in
// flight; a duplicate waiting past its context's deadline, or past Config.Wait, gets
// idem.ErrInFlight on time and writes nothing, also when the holder is another process; a
// process killed (SIGKILL) between its business write and the commit leaves nothing, and the
// retry executes exactly once; the claim keeps the Call's route, cleaned, and a copy of its
// request, and a Call without them keeps neither; the runner and an engine on the same store
// see each other's records; and a record past its TTL counts as absent, its key executed once
// more by concurrent duplicates.
//
// The crash test runs the test binary again (os.Args[0], with -test.run naming the test
// that called Run) with an environment variable that makes Run play the child's part.
package txtest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/storekit"
)

// Config says how the constructor builds a Harness.
type Config struct {
	// Wait is the runner's TxOptions.Wait: how long a duplicate waits for the transaction of a
	// concurrent holder of its key (0: the store's default; negative: only the context's
	// deadline bounds it).
	Wait time.Duration
	// TTL is the store's TxTTL, how long a response the runner stored is replayed (0: the
	// store's default).
	TTL time.Duration
	// Now is the store's clock for the runner (its Options.Now); nil: time.Now.
	Now func() time.Time
	// Attach, when not empty, is the Name of a Harness made by an earlier call, possibly in
	// another process: the constructor opens the same records and business table, creating
	// and cleaning up nothing.
	Attach string
}

// Harness is one store in transaction mode, isolated from every other Harness.
type Harness struct {
	// Runner is the store's transaction runner, built with Config.Wait.
	Runner idem.Runner
	// Store is the store Runner keeps its records in.
	Store idem.Store
	// Insert writes one business row through the transaction Runner runs fn in; ctx is fn's
	// context (the one the store's TxFromContext reads).
	Insert func(ctx context.Context) error
	// Count returns how many business rows are committed.
	Count func(ctx context.Context) (int, error)
	// Name identifies the records and the business table, for Config.Attach.
	Name string
	// RunTx and DoTx are the store's own transaction mode (Store.RunTx and its short form
	// Store.DoTx), fn run in their transaction.
	RunTx func(ctx context.Context, call idem.Call, fn idem.Func) (idem.Result, error)
	DoTx  func(ctx context.Context, key, fingerprint string, fn idem.Func) (idem.Result, error)
}

// NewHarness returns a fresh Harness for one subtest.
type NewHarness func(t *testing.T, cfg Config) Harness

// Environment variables of the crash test's child process.
const (
	envAttach = "IDEM_TXTEST_ATTACH" // the parent's Harness.Name
	envKey    = "IDEM_TXTEST_KEY"    // the key the child claims
)

// written is the line the child prints once its business row is written, uncommitted.
const written = "txtest: row written, transaction open"

// Run runs the suite against harnesses made by newHarness. In the crash test's child process
// it plays the child's part instead.
func Run(t *testing.T, newHarness NewHarness) {
	if name := os.Getenv(envAttach); name != "" {
		child(t, newHarness, name, os.Getenv(envKey))
		return
	}
	s := suite{new: newHarness, pattern: runPattern(t.Name())}
	// First, one at a time: the crowds of waiting duplicates would hold every pooled
	// connection, and the timing of the wait tests would be the pool's, not the store's.
	for _, tc := range []struct {
		name string
		fn   func(t *testing.T)
	}{
		{"ConcurrentDuplicates", s.concurrentDuplicates},
		{"ExpiredIsAbsent", s.expiredIsAbsent},
		{"DeadlineEndsWait", s.deadlineEndsWait},
		{"WaitEndsWait", s.waitEndsWait},
		{"CrashBeforeCommit", s.crash},
	} {
		t.Run(tc.name, tc.fn)
	}
	tests := []struct {
		name string
		fn   func(t *testing.T)
	}{
		{"ErrorRollsBack", s.errorRollsBack},
		{"PanicRollsBack", s.panicRollsBack},
		{"WaiterTakesOverRollback", s.waiterTakesOver},
		{"Mismatch", s.mismatch},
		{"SharedWithEngine", s.sharedWithEngine},
		{"KeepsCall", s.keepsCall},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t)
		})
	}
}

type suite struct {
	new     NewHarness
	pattern string // -test.run for the test that called Run
}

// runPattern is a -test.run pattern that selects exactly the test named name.
func runPattern(name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	return strings.Join(parts, "/")
}

var (
	fpA = idem.Fingerprint([]byte("order a"))
	fpB = idem.Fingerprint([]byte("order b"))
)

func testCtx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return c
}

// order is the effect: one business row, and a 201 whose body is random bytes (binary
// included), so a replay that is not the first answer byte for byte shows.
func order(h Harness, pause time.Duration) idem.Func {
	return func(ctx context.Context) (idem.Response, error) {
		if err := h.Insert(ctx); err != nil {
			return idem.Response{}, err
		}
		time.Sleep(pause)
		body := make([]byte, 64)
		_, _ = rand.Read(body)
		return idem.Response{Status: 201, Header: map[string][]string{"X-Order": {fmt.Sprintf("%x", body[:8])}}, Body: body}, nil
	}
}

func (s suite) harness(t *testing.T, wait time.Duration) Harness {
	t.Helper()
	return s.harnessWith(t, Config{Wait: wait})
}

func (s suite) harnessWith(t *testing.T, cfg Config) Harness {
	t.Helper()
	h := s.new(t, cfg)
	if h.Runner == nil || h.Store == nil || h.Insert == nil || h.Count == nil || h.Name == "" {
		t.Fatalf("txtest: the constructor returned an incomplete Harness %+v", h)
	}
	return h
}

func rows(t *testing.T, h Harness) int {
	t.Helper()
	n, err := h.Count(context.Background())
	if err != nil {
		t.Fatalf("counting business rows: %v", err)
	}
	return n
}

// nothing fails t unless key has no record and the business table has want rows.
func nothing(t *testing.T, h Harness, key string, want int, after string) {
	t.Helper()
	if n := rows(t, h); n != want {
		t.Fatalf("%s: %d business rows, want %d", after, n, want)
	}
	if rec, err := h.Store.Get(context.Background(), key); !errors.Is(err, idem.ErrNotFound) {
		t.Fatalf("%s: record %+v, %v; want none (idem.ErrNotFound)", after, rec, err)
	}
}

// executesOnce runs key once more, expecting it to execute, then once again, expecting the
// replay, with want business rows in the end.
func executesOnce(t *testing.T, h Harness, key string, want int) {
	t.Helper()
	ctx := testCtx(t)
	r1, err := h.Runner.Run(ctx, idem.Call{Key: key, Fingerprint: fpA}, order(h, 0))
	if err != nil || !r1.Executed || r1.Replayed || !r1.Kept {
		t.Fatalf("retry of %q: %+v, %v; want it executed and kept", key, r1, err)
	}
	r2, err := h.Runner.Run(ctx, idem.Call{Key: key, Fingerprint: fpA}, func(context.Context) (idem.Response, error) {
		t.Errorf("%q executed again after it was kept", key)
		return idem.Response{}, nil
	})
	if err != nil || !r2.Replayed || !r2.Response.Equal(r1.Response) {
		t.Fatalf("second retry of %q: %+v, %v; want the replay of %+v", key, r2, err, r1.Response)
	}
	if n := rows(t, h); n != want {
		t.Fatalf("after the retries of %q: %d business rows, want %d", key, n, want)
	}
}

// 100 concurrent identical requests, three times: one business row and one execution each,
// and 99 replays byte for byte identical to its answer.
func (s suite) concurrentDuplicates(t *testing.T) {
	h := s.harness(t, 0)
	const n = 100
	for round := range 3 {
		key := fmt.Sprintf("dup-%d", round)
		results := make([]idem.Result, n)
		errs := make([]error, n)
		start := make(chan struct{})
		ctx := testCtx(t)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				<-start
				results[i], errs[i] = h.Runner.Run(ctx, idem.Call{Key: key, Fingerprint: fpA}, order(h, 20*time.Millisecond))
			})
		}
		close(start)
		wg.Wait()
		first := -1
		for i := range n {
			if errs[i] != nil {
				t.Fatalf("round %d: request %d: %v", round, i, errs[i])
			}
			switch r := results[i]; {
			case r.Executed && !r.Replayed:
				if first >= 0 {
					t.Fatalf("round %d: requests %d and %d both executed", round, first, i)
				}
				first = i
			case !r.Replayed:
				t.Fatalf("round %d: request %d neither executed nor replayed: %+v", round, i, r)
			}
		}
		if first < 0 {
			t.Fatalf("round %d: no request executed", round)
		}
		want := results[first].Response
		for i, r := range results {
			if !r.Response.Equal(want) || !bytes.Equal(r.Response.Body, want.Body) || r.Response.Status != 201 {
				t.Fatalf("round %d: answer %d %+v differs from the first %+v", round, i, r.Response, want)
			}
		}
		if got := rows(t, h); got != round+1 {
			t.Fatalf("round %d: %d business rows, want %d", round, got, round+1)
		}
	}
}

// An error from fn, or a status the policy rolls back, leaves neither the row nor a record;
// the retry executes.
func (s suite) errorRollsBack(t *testing.T) {
	h := s.harness(t, 0)
	ctx := testCtx(t)
	boom := errors.New("card declined")
	_, err := h.Runner.Run(ctx, idem.Call{Key: "err", Fingerprint: fpA}, func(ctx context.Context) (idem.Response, error) {
		if err := h.Insert(ctx); err != nil {
			return idem.Response{}, err
		}
		return idem.Response{}, boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("fn's error: Do returned %v, want it", err)
	}
	nothing(t, h, "err", 0, "after fn's error")
	executesOnce(t, h, "err", 1)

	res, err := h.Runner.Run(ctx, idem.Call{Key: "500", Fingerprint: fpA}, func(ctx context.Context) (idem.Response, error) {
		if err := h.Insert(ctx); err != nil {
			return idem.Response{}, err
		}
		return idem.Response{Status: 500, Body: []byte("upstream failed")}, nil
	})
	if err != nil || !res.Executed || res.Kept || res.Response.Status != 500 {
		t.Fatalf("a 500: %+v, %v; want it executed, not kept", res, err)
	}
	nothing(t, h, "500", 1, "after a 500")
	executesOnce(t, h, "500", 2)
}

// A panic in fn rolls back (neither row nor record) and reaches the caller; the retry
// executes.
func (s suite) panicRollsBack(t *testing.T) {
	h := s.harness(t, 0)
	ctx := testCtx(t)
	type boom struct{ msg string }
	got := func() (v any) {
		defer func() { v = recover() }()
		_, _ = h.Runner.Run(ctx, idem.Call{Key: "p", Fingerprint: fpA}, func(ctx context.Context) (idem.Response, error) {
			if err := h.Insert(ctx); err != nil {
				return idem.Response{}, err
			}
			panic(boom{"handler fails"})
		})
		return nil
	}()
	if got != (boom{"handler fails"}) {
		t.Fatalf("Do recovered %v, want fn's panic to go on", got)
	}
	nothing(t, h, "p", 0, "after a panic")
	executesOnce(t, h, "p", 1)
}

// A duplicate that waits on a claim whose transaction then rolls back takes the key and
// executes, once.
func (s suite) waiterTakesOver(t *testing.T) {
	h := s.harness(t, 0)
	ctx := testCtx(t)
	began := make(chan struct{})
	var wg sync.WaitGroup
	var first, second idem.Result
	var firstErr, secondErr error
	wg.Go(func() {
		first, firstErr = h.Runner.Run(ctx, idem.Call{Key: "k", Fingerprint: fpA}, func(ctx context.Context) (idem.Response, error) {
			if err := h.Insert(ctx); err != nil {
				return idem.Response{}, err
			}
			close(began)
			time.Sleep(300 * time.Millisecond)
			return idem.Response{Status: 503}, nil
		})
	})
	<-began
	wg.Go(func() { second, secondErr = h.Runner.Run(ctx, idem.Call{Key: "k", Fingerprint: fpA}, order(h, 0)) })
	wg.Wait()
	if firstErr != nil || first.Kept {
		t.Fatalf("first: %+v, %v; want a 503 rolled back", first, firstErr)
	}
	if secondErr != nil || !second.Executed || second.Replayed || second.Response.Status != 201 {
		t.Fatalf("the waiting duplicate: %+v, %v; want it to execute", second, secondErr)
	}
	if n := rows(t, h); n != 1 {
		t.Fatalf("%d business rows, want 1", n)
	}
}

// keepsCall: the runner's claim keeps the Call's route, cleaned as idem.Call says, and its
// request, as the engine's does, in the store's own copy; a claim without them keeps none. The
// store's own transaction mode (RunTx) does the same, and DoTx, its short form, keeps neither.
func (s suite) keepsCall(t *testing.T) {
	h := s.harness(t, 0)
	ok := func(context.Context) (idem.Response, error) { return idem.Response{Status: 201}, nil }
	for _, r := range []struct {
		name string
		run  func(ctx context.Context, call idem.Call, fn idem.Func) (idem.Result, error)
		fn   idem.Func
	}{{"Runner.Run", h.Runner.Run, order(h, 0)}, {"RunTx", h.RunTx, ok}} {
		sent := &idem.Request{Method: "POST", Target: "/v1/tx", Header: map[string][]string{"Content-Type": {"application/json"}},
			Body: []byte(`{"n":1}`), BodySize: 7}
		mine := sent.Clone()
		if _, err := r.run(testCtx(t), idem.Call{Key: r.name + "/with", Fingerprint: fpA, Route: "POST /v1/tx", Request: mine}, r.fn); err != nil {
			t.Fatal(r.name, err)
		}
		mine.Body[0], mine.Header["Content-Type"][0] = 'X', "changed" // the caller reuses its buffers
		if rec, err := h.Store.Get(testCtx(t), r.name+"/with"); err != nil || !rec.Request.Equal(sent) || rec.Route != "POST /v1/tx" {
			t.Fatalf("%s: Get = %+v, %v; want the request and the route POST /v1/tx kept", r.name, rec, err)
		}
		dirty := "GET /a\x00b\xff" + strings.Repeat("\u00e9", idem.MaxRouteLen)
		if _, err := r.run(testCtx(t), idem.Call{Key: r.name + "/dirty", Fingerprint: fpA, Route: dirty}, r.fn); err != nil {
			t.Fatal(r.name, err)
		}
		if rec, err := h.Store.Get(testCtx(t), r.name+"/dirty"); err != nil || rec.Route != storekit.CleanRoute(dirty) {
			t.Fatalf("%s: Get = %+v, %v; want the route cleaned to %.40q", r.name, rec, err, storekit.CleanRoute(dirty))
		}
		if _, err := r.run(testCtx(t), idem.Call{Key: r.name + "/without", Fingerprint: fpA}, r.fn); err != nil {
			t.Fatal(r.name, err)
		}
		if rec, err := h.Store.Get(testCtx(t), r.name+"/without"); err != nil || rec.Request != nil || rec.Route != "" {
			t.Fatalf("%s: Get = %+v, %v; want no request and no route", r.name, rec, err)
		}
	}
	if _, err := h.DoTx(testCtx(t), "dotx", fpA, ok); err != nil {
		t.Fatal(err)
	}
	if rec, err := h.Store.Get(testCtx(t), "dotx"); err != nil || rec.Request != nil || rec.Route != "" {
		t.Fatalf("DoTx: Get = %+v, %v; want no request and no route", rec, err)
	}
}

// The key with another payload gets idem.ErrMismatch and writes nothing: after the first
// committed, and while the first is in flight (once it commits).
func (s suite) mismatch(t *testing.T) {
	h := s.harness(t, 0)
	ctx := testCtx(t)
	if _, err := h.Runner.Run(ctx, idem.Call{Key: "k", Fingerprint: fpA}, order(h, 0)); err != nil {
		t.Fatal(err)
	}
	never := func(context.Context) (idem.Response, error) {
		t.Error("fn ran for a key used with another payload")
		return idem.Response{}, nil
	}
	if _, err := h.Runner.Run(ctx, idem.Call{Key: "k", Fingerprint: fpB}, never); !errors.Is(err, idem.ErrMismatch) {
		t.Fatalf("another payload: %v, want idem.ErrMismatch", err)
	}
	if n := rows(t, h); n != 1 {
		t.Fatalf("%d business rows, want 1", n)
	}

	began, hold := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := h.Runner.Run(ctx, idem.Call{Key: "held", Fingerprint: fpA}, func(ctx context.Context) (idem.Response, error) {
			if err := h.Insert(ctx); err != nil {
				return idem.Response{}, err
			}
			close(began)
			<-hold
			return idem.Response{Status: 201}, nil
		})
		done <- err
	}()
	<-began
	mismatch := make(chan error, 1)
	go func() {
		_, err := h.Runner.Run(ctx, idem.Call{Key: "held", Fingerprint: fpB}, never)
		mismatch <- err
	}()
	time.Sleep(100 * time.Millisecond) // the duplicate waits on the first transaction
	close(hold)
	if err := <-done; err != nil {
		t.Fatalf("first: %v", err)
	}
	if err := <-mismatch; !errors.Is(err, idem.ErrMismatch) {
		t.Fatalf("another payload while the first was in flight: %v, want idem.ErrMismatch", err)
	}
	if n := rows(t, h); n != 2 {
		t.Fatalf("%d business rows, want 2", n)
	}
}

// slack is how late, past its bound, a duplicate's wait may end.
const slack = time.Second

// hold starts a request on key that writes its row and keeps its transaction open until
// release is called; release waits for it to commit.
func hold(t *testing.T, h Harness, key string) (release func()) {
	t.Helper()
	began, unblock := make(chan struct{}), make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(unblock) }) }
	// A test that fails while the key is held ends its transaction too, at once, instead of
	// leaving it open and the test hung until the binary's time limit.
	t.Cleanup(free)
	done := make(chan error, 1)
	go func() {
		res, err := h.Runner.Run(testCtx(t), idem.Call{Key: key, Fingerprint: fpA}, func(ctx context.Context) (idem.Response, error) {
			if err := h.Insert(ctx); err != nil {
				return idem.Response{}, err
			}
			close(began)
			<-unblock
			return idem.Response{Status: 201, Body: []byte("first")}, nil
		})
		if err == nil && !res.Kept {
			err = fmt.Errorf("first: %+v not kept", res)
		}
		done <- err
	}()
	select {
	case <-began:
	case err := <-done:
		t.Fatalf("the first request ended before its function ran: %v", err)
	}
	return func() {
		free()
		if err := <-done; err != nil {
			t.Fatalf("first request: %v", err)
		}
	}
}

// waitsOut runs a duplicate of a held key and checks it gets idem.ErrInFlight within bound
// (plus slack), and not before half of it (a wait bounded by less, or not at all), without
// running fn.
func waitsOut(t *testing.T, h Harness, ctx context.Context, key string, bound time.Duration) {
	t.Helper()
	start := time.Now()
	_, err := h.Runner.Run(ctx, idem.Call{Key: key, Fingerprint: fpA}, func(context.Context) (idem.Response, error) {
		t.Error("the duplicate ran fn while the first transaction was open")
		return idem.Response{}, nil
	})
	took := time.Since(start)
	var ife *idem.InFlightError
	if !errors.As(err, &ife) || !errors.Is(err, idem.ErrInFlight) || ife.RetryAfter != time.Second {
		t.Fatalf("duplicate past its bound of %s: %v after %s, want an *idem.InFlightError (idem.ErrInFlight) with RetryAfter 1s", bound, err, took)
	}
	if took > bound+slack {
		t.Fatalf("duplicate with a bound of %s answered after %s", bound, took)
	}
	if took < bound/2 {
		t.Errorf("duplicate with a bound of %s gave up after %s", bound, took)
	}
}

// With no wait bound of its own, a duplicate's context deadline ends its wait with
// idem.ErrInFlight, on time; once the first commits, the key replays.
func (s suite) deadlineEndsWait(t *testing.T) {
	h := s.harness(t, -1)
	release := hold(t, h, "k")
	const deadline = 300 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	waitsOut(t, h, ctx, "k", deadline)
	cancel()
	release()
	res, err := h.Runner.Run(testCtx(t), idem.Call{Key: "k", Fingerprint: fpA}, order(h, 0))
	if err != nil || !res.Replayed || string(res.Response.Body) != "first" {
		t.Fatalf("after the commit: %+v, %v; want the replay", res, err)
	}
	if n := rows(t, h); n != 1 {
		t.Fatalf("%d business rows, want 1", n)
	}
}

// Config.Wait ends a duplicate's wait with idem.ErrInFlight, on time, without a deadline.
func (s suite) waitEndsWait(t *testing.T) {
	const wait = 300 * time.Millisecond
	h := s.harness(t, wait)
	release := hold(t, h, "k")
	waitsOut(t, h, context.Background(), "k", wait)
	release()
	if n := rows(t, h); n != 1 {
		t.Fatalf("%d business rows, want 1", n)
	}
}

// A process killed between its business write and the commit leaves neither row nor record;
// the retry executes exactly once.
func (s suite) crash(t *testing.T) {
	h := s.harness(t, 0)
	const key = "crash"
	ctx := testCtx(t)
	// Opened before the child holds its transaction (a SQLite store's Open needs the write
	// lock).
	const deadline = 300 * time.Millisecond
	h2 := s.harnessWith(t, Config{Attach: h.Name, Wait: deadline})
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run="+s.pattern, "-test.count=1")
	cmd.Env = append(os.Environ(), envAttach+"="+h.Name, envKey+"="+key)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string)
	var seen bytes.Buffer
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	for wrote := false; !wrote; {
		select {
		case l, ok := <-lines:
			if !ok {
				_ = cmd.Wait()
				t.Fatalf("the child ended before writing its row:\n%s%s", seen.String(), stderr.String())
			}
			seen.WriteString(l + "\n")
			wrote = l == written
		case <-ctx.Done():
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			t.Fatalf("the child did not write its row in time:\n%s%s", seen.String(), stderr.String())
		}
	}
	// Another process holds the key's transaction: a duplicate's wait for it ends on time too.
	dctx, cancel := context.WithTimeout(context.Background(), deadline)
	waitsOut(t, h, dctx, key, deadline)
	cancel()
	// And so does one bounded by Config.Wait alone, on a second harness over the same store.
	waitsOut(t, h2, context.Background(), key, deadline)
	if err := cmd.Process.Kill(); err != nil { // SIGKILL: no deferred rollback, no goodbye
		t.Fatal(err)
	}
	go func() {
		for range lines { // drain, so the reader ends
		}
	}()
	_ = cmd.Wait()
	nothing(t, h, key, 0, "after the crash")
	executesOnce(t, h, key, 1)
}

// child is the crash test's other process: it claims key in h's store, writes its business
// row, says so and waits to be killed.
func child(t *testing.T, newHarness NewHarness, name, key string) {
	h := newHarness(t, Config{Attach: name})
	_, err := h.Runner.Run(context.Background(), idem.Call{Key: key, Fingerprint: fpA}, func(ctx context.Context) (idem.Response, error) {
		if err := h.Insert(ctx); err != nil {
			return idem.Response{}, err
		}
		fmt.Println(written)
		time.Sleep(time.Hour) // until the parent's SIGKILL
		return idem.Response{Status: 201}, nil
	})
	t.Fatalf("txtest child: Do returned %v instead of being killed", err)
}

// The runner and an engine on the same store see each other's records: each replays what the
// other completed, and a key the engine holds is in flight for the runner, which writes
// nothing.
func (s suite) sharedWithEngine(t *testing.T) {
	h := s.harness(t, 0)
	ctx := testCtx(t)
	eng, err := idem.New(h.Store, idem.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := eng.Do(ctx, "by-engine", fpA, func(context.Context) (idem.Response, error) {
		return idem.Response{Status: 200, Body: []byte("engine")}, nil
	}); err != nil {
		t.Fatal(err)
	}
	r, err := h.Runner.Run(ctx, idem.Call{Key: "by-engine", Fingerprint: fpA}, order(h, 0))
	if err != nil || !r.Replayed || string(r.Response.Body) != "engine" {
		t.Fatalf("runner after the engine: %+v, %v; want the engine's answer replayed", r, err)
	}
	first, err := h.Runner.Run(ctx, idem.Call{Key: "by-runner", Fingerprint: fpA}, order(h, 0))
	if err != nil || !first.Executed {
		t.Fatalf("runner: %+v, %v", first, err)
	}
	r, err = eng.Do(ctx, "by-runner", fpA, func(context.Context) (idem.Response, error) {
		t.Error("the engine executed a key the runner completed")
		return idem.Response{}, nil
	})
	if err != nil || !r.Replayed || !r.Response.Equal(first.Response) {
		t.Fatalf("engine after the runner: %+v, %v; want the runner's answer replayed", r, err)
	}
	if res, err := h.Store.Reserve(ctx, idem.ReserveRequest{Key: "held", Fingerprint: fpA, Now: time.Now(), Lease: time.Minute, TTL: time.Hour}); err != nil || !res.Claimed {
		t.Fatalf("engine's claim: %+v, %v", res, err)
	}
	if _, err := h.Runner.Run(ctx, idem.Call{Key: "held", Fingerprint: fpA}, order(h, 0)); !errors.Is(err, idem.ErrInFlight) {
		t.Fatalf("runner on a key the engine holds: %v, want idem.ErrInFlight", err)
	}
	if n := rows(t, h); n != 1 {
		t.Fatalf("%d business rows, want 1", n)
	}
}

// A record past its TxTTL counts as absent: concurrent duplicates of its key execute once
// more, and replay the new answer, not the old one.
func (s suite) expiredIsAbsent(t *testing.T) {
	const ttl = time.Minute
	var clock atomic.Int64 // Unix microseconds
	clock.Store(time.Now().UnixMicro())
	h := s.harnessWith(t, Config{TTL: ttl, Now: func() time.Time { return time.UnixMicro(clock.Load()) }})
	ctx := testCtx(t)
	old, err := h.Runner.Run(ctx, idem.Call{Key: "k", Fingerprint: fpA}, order(h, 0))
	if err != nil || !old.Executed {
		t.Fatalf("first: %+v, %v", old, err)
	}
	clock.Add((ttl + time.Second).Microseconds())
	const n = 20
	results := make([]idem.Result, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			results[i], errs[i] = h.Runner.Run(ctx, idem.Call{Key: "k", Fingerprint: fpA}, order(h, 10*time.Millisecond))
		})
	}
	close(start)
	wg.Wait()
	executed := 0
	var fresh idem.Response
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("duplicate %d of an expired key: %v", i, errs[i])
		}
		if results[i].Executed {
			executed++
			fresh = results[i].Response
		}
	}
	if executed != 1 {
		t.Fatalf("%d of %d duplicates of an expired key executed, want 1", executed, n)
	}
	for i, r := range results {
		if !r.Response.Equal(fresh) || r.Response.Equal(old.Response) {
			t.Fatalf("duplicate %d answered %+v, want the new answer %+v", i, r.Response, fresh)
		}
	}
	if got := rows(t, h); got != 2 {
		t.Fatalf("%d business rows, want 2", got)
	}
}

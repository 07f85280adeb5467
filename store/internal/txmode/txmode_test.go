package txmode

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
)

// The stores' conformance suites (store/storetest/txtest) run this package against real
// databases. These tests drive its logic alone, with a scripted attempt in place of a
// database transaction: what commits and what rolls back, which results come back, how often
// an attempt runs.

// fakeTx is a transaction of the scripted attempt: it commits or rolls back once.
type fakeTx struct {
	n          int // the attempt that began it, from 1
	committed  bool
	rolledBack bool
}

// step is what one call of the scripted attempt does.
type step struct {
	// claim runs fn in a new transaction: fn's error comes back unchanged after a rollback,
	// as the stores' doTx returns it; else the commit fails with err (and retry) when err is
	// set, or commits and returns kept.
	claim bool
	// res, retry and err are the attempt's answer: without claim, instead of running fn;
	// with claim, a failed commit's (res ignored).
	res   idem.Result
	retry bool
	err   error
}

// kept is the Result of a scripted commit.
var kept = idem.Result{Kept: true, ExpiresAt: time.Unix(1000, 0)}

// errRunaway ends a scripted attempt called far more often than any test expects, so that
// a mutant which loops forever fails the test instead of hanging it.
var errRunaway = errors.New("attempt called too often")

// script is a scripted attempt: its calls follow steps, the last step repeating.
type script struct {
	ctx   context.Context // fn's context, as the store's attempt passes it
	steps []step
	calls int
	txs   []*fakeTx
}

func newScript(ctx context.Context, steps ...step) *script {
	return &script{ctx: ctx, steps: steps}
}

func (s *script) attempt(fn Func[*fakeTx]) (idem.Result, bool, error) {
	s.calls++
	if s.calls > 100 {
		return idem.Result{}, false, errRunaway
	}
	st := s.steps[min(s.calls, len(s.steps))-1]
	if !st.claim {
		return st.res, st.retry, st.err
	}
	tx := &fakeTx{n: s.calls}
	s.txs = append(s.txs, tx)
	defer func() {
		// The deferred rollback of a store's attempt: it runs on every way out, a panic too.
		if !tx.committed {
			tx.rolledBack = true
		}
	}()
	resp, err := fn(s.ctx, tx)
	if err != nil {
		return idem.Result{}, false, err
	}
	if st.err != nil {
		return idem.Result{}, st.retry, st.err
	}
	tx.committed = true
	r := kept
	r.Response = resp
	return r, false, nil
}

// lastTx is the transaction of the script's last claim.
func (s *script) lastTx(t *testing.T) *fakeTx {
	t.Helper()
	if len(s.txs) == 0 {
		t.Fatal("no attempt ran fn")
	}
	return s.txs[len(s.txs)-1]
}

func ready(context.Context) error { return nil }

type ctxKey struct{}

var (
	fp       = idem.Fingerprint([]byte("a"))
	otherFP  = idem.Fingerprint([]byte("b"))
	errFn    = errors.New("fn failed")
	errAbort = errors.New("serialization failure")
)

func keepAll(idem.Response, error) idem.Disposition { return idem.DispositionKeep }

func TestDefaults(t *testing.T) {
	clock := func() time.Time { return time.Unix(42, 0) }
	ttl, now := Defaults(0, clock)
	if ttl != DefaultTTL || !now().Equal(time.Unix(42, 0)) {
		t.Errorf("Defaults(0, clock) = %v, %v; want DefaultTTL and the clock given", ttl, now())
	}
	ttl, now = Defaults(time.Minute, nil)
	if ttl != time.Minute {
		t.Errorf("Defaults(1m, nil) TTL = %v, want 1m", ttl)
	}
	before := time.Now()
	got := now()
	if got.Before(before) || got.After(time.Now()) {
		t.Errorf("Defaults(1m, nil) clock = %v, want time.Now", got)
	}
	if ttl, _ := Defaults(-time.Second, clock); ttl != -time.Second {
		t.Errorf("Defaults(-1s) TTL = %v, want it left for the store to reject", ttl)
	}
	if DefaultTTL != 24*time.Hour || DefaultWait != 10*time.Second {
		t.Errorf("DefaultTTL = %v, DefaultWait = %v; the stores document 24h and 10s", DefaultTTL, DefaultWait)
	}
}

func TestSettings(t *testing.T) {
	p, w := Settings(nil, 0)
	if w != DefaultWait {
		t.Errorf("Settings wait 0 = %v, want DefaultWait", w)
	}
	// idem.DefaultPolicy releases a 500 and keeps a 200; keepAll keeps both.
	if p(idem.Response{Status: 500}, nil) != idem.DispositionRelease || p(idem.Response{Status: 200}, nil) != idem.DispositionKeep {
		t.Error("Settings(nil policy) is not idem.DefaultPolicy")
	}
	if p, _ := Settings(keepAll, 0); p(idem.Response{Status: 500}, nil) != idem.DispositionKeep {
		t.Error("Settings replaced a policy that was given")
	}
	for _, tc := range []struct{ in, want time.Duration }{
		{time.Nanosecond, time.Nanosecond},
		{3 * time.Second, 3 * time.Second},
		{-time.Nanosecond, 0},
		{-time.Hour, 0},
	} {
		if _, w := Settings(nil, tc.in); w != tc.want {
			t.Errorf("Settings wait %v = %v, want %v", tc.in, w, tc.want)
		}
	}
}

func TestRetry(t *testing.T) {
	t.Run("until no retry", func(t *testing.T) {
		s := newScript(context.Background(),
			step{retry: true, err: errAbort},
			step{retry: true, err: errAbort},
			step{res: idem.Result{Replayed: true}})
		res, err := Retry(s.attempt, func(context.Context, *fakeTx) (idem.Response, error) { return idem.Response{}, nil })
		if err != nil || !res.Replayed || s.calls != 3 {
			t.Errorf("Retry = %+v, %v after %d attempts; want the third attempt's replay", res, err, s.calls)
		}
	})
	t.Run("bounded", func(t *testing.T) {
		s := newScript(context.Background(), step{res: idem.Result{Takeover: true}, retry: true, err: errAbort})
		res, err := Retry(s.attempt, func(context.Context, *fakeTx) (idem.Response, error) { return idem.Response{}, nil })
		if !errors.Is(err, errAbort) || !res.Takeover || s.calls != Retries+1 {
			t.Errorf("Retry of aborts = %+v, %v after %d attempts; want the last abort after %d", res, err, s.calls, Retries+1)
		}
	})
	t.Run("fn runs again", func(t *testing.T) {
		// DoTx's fn is the caller's TxFunc: a re-run after an abort runs it again, in a new
		// transaction, and the one that commits is the answer.
		runs := 0
		s := newScript(context.Background(), step{claim: true, retry: true, err: errAbort}, step{claim: true})
		res, err := Retry(s.attempt, func(context.Context, *fakeTx) (idem.Response, error) {
			runs++
			return idem.Response{Status: 200 + runs}, nil
		})
		if err != nil || res.Response.Status != 202 || runs != 2 || !s.txs[0].rolledBack || !s.txs[1].committed {
			t.Errorf("Retry = %+v, %v, fn ran %d times; want the second run committed", res, err, runs)
		}
	})
}

func TestDoTx(t *testing.T) {
	fn := func(context.Context, *fakeTx) (idem.Response, error) { return idem.Response{Status: 201}, nil }
	t.Run("not ready", func(t *testing.T) {
		s := newScript(context.Background(), step{claim: true})
		_, err := DoTx(context.Background(), "pgstore", func(context.Context) error { return idem.ErrClosed }, fn, s.attempt)
		if !errors.Is(err, idem.ErrClosed) || s.calls != 0 {
			t.Errorf("DoTx on a closed store = %v after %d attempts, want idem.ErrClosed and none", err, s.calls)
		}
	})
	t.Run("nil fn", func(t *testing.T) {
		s := newScript(context.Background(), step{claim: true})
		_, err := DoTx[*fakeTx](context.Background(), "pgstore", ready, nil, s.attempt)
		if !errors.Is(err, idem.ErrInvalidInput) || !strings.HasPrefix(err.Error(), "pgstore: ") || s.calls != 0 {
			t.Errorf("DoTx(nil fn) = %v after %d attempts, want pgstore's ErrInvalidInput and none", err, s.calls)
		}
	})
	t.Run("retried", func(t *testing.T) {
		s := newScript(context.Background(), step{claim: true, retry: true, err: errAbort}, step{claim: true})
		res, err := DoTx(context.Background(), "pgstore", ready, fn, s.attempt)
		if err != nil || !res.Kept || res.Response.Status != 201 || s.calls != 2 {
			t.Errorf("DoTx = %+v, %v after %d attempts; want the second attempt's commit", res, err, s.calls)
		}
	})
	t.Run("fn's error", func(t *testing.T) {
		s := newScript(context.Background(), step{claim: true})
		_, err := DoTx(context.Background(), "pgstore", ready, func(context.Context, *fakeTx) (idem.Response, error) {
			return idem.Response{}, errFn
		}, s.attempt)
		if err != errFn || !s.lastTx(t).rolledBack || s.calls != 1 {
			t.Errorf("DoTx = %v after %d attempts, want fn's error unchanged, rolled back, not retried", err, s.calls)
		}
	})
}

func TestAnswer(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	rec := func(fingerprint string, state idem.State, leaseLeft time.Duration) *idem.Record {
		return &idem.Record{Key: "k", Fingerprint: fingerprint, State: state, LeaseUntil: now.Add(leaseLeft), ExpiresAt: now.Add(time.Hour)}
	}
	t.Run("replay", func(t *testing.T) {
		r := rec(fp, idem.StateCompleted, 0)
		r.Response = &idem.Response{Status: 201, Body: []byte("made")}
		res, retry, err := Answer(r, fp, now)
		if err != nil || retry || !res.Replayed || !res.Kept || res.Executed || res.Response.Status != 201 ||
			string(res.Response.Body) != "made" || !res.ExpiresAt.Equal(now.Add(time.Hour)) {
			t.Errorf("Answer(completed) = %+v, %v, %v; want a kept replay of the stored response", res, retry, err)
		}
	})
	t.Run("replay without a response", func(t *testing.T) {
		res, _, err := Answer(rec(fp, idem.StateCompleted, 0), fp, now)
		if err != nil || !res.Replayed || res.Response.Status != 0 || res.Response.Body != nil {
			t.Errorf("Answer(completed, no response) = %+v, %v; want a replay of the zero response", res, err)
		}
	})
	t.Run("mismatch", func(t *testing.T) {
		for _, state := range []idem.State{idem.StateCompleted, idem.StateInProgress} {
			r := rec(fp, state, time.Minute)
			r.Key = strings.Repeat("x", 100)
			res, retry, err := Answer(r, otherFP, now)
			if !errors.Is(err, idem.ErrMismatch) || errors.Is(err, idem.ErrInFlight) || retry || res.Replayed {
				t.Errorf("Answer(%s, other fingerprint) = %+v, %v, %v; want ErrMismatch", state, res, retry, err)
			}
			if want := `"` + strings.Repeat("x", 80) + `"`; !strings.Contains(err.Error(), want) {
				t.Errorf("mismatch error %q does not quote the key cut at 80", err)
			}
		}
	})
	t.Run("in flight", func(t *testing.T) {
		for _, tc := range []struct{ left, want time.Duration }{
			{-time.Hour, time.Second},
			{0, time.Second},
			{time.Nanosecond, time.Second},
			{time.Second, time.Second},
			{time.Second + time.Nanosecond, 2 * time.Second},
			{1500 * time.Millisecond, 2 * time.Second},
			{2 * time.Second, 2 * time.Second},
			{7*time.Second - time.Nanosecond, 7 * time.Second},
			{time.Minute, time.Minute},
		} {
			res, retry, err := Answer(rec(fp, idem.StateInProgress, tc.left), fp, now)
			var ife *idem.InFlightError
			if !errors.As(err, &ife) || retry || res.Replayed || res.Kept {
				t.Fatalf("Answer(in progress) = %+v, %v, %v; want an *idem.InFlightError", res, retry, err)
			}
			if ife.Key != "k" || ife.RetryAfter != tc.want {
				t.Errorf("lease left %v: InFlightError{%q, %v}, want {\"k\", %v}", tc.left, ife.Key, ife.RetryAfter, tc.want)
			}
		}
	})
}

func TestWaitEnded(t *testing.T) {
	err := WaitEnded("k")
	var ife *idem.InFlightError
	if !errors.As(err, &ife) || !errors.Is(err, idem.ErrInFlight) || ife.Key != "k" || ife.RetryAfter != time.Second {
		t.Errorf("WaitEnded = %#v, want an InFlightError for k, retry after 1s", err)
	}
}

func TestFromContext(t *testing.T) {
	tx := &fakeTx{}
	ctx := context.WithValue(context.Background(), ctxKey{}, tx)
	if got := FromContext[*fakeTx](ctx, ctxKey{}); got != tx {
		t.Errorf("FromContext = %v, want the transaction", got)
	}
	if got := FromContext[*fakeTx](context.Background(), ctxKey{}); got != nil {
		t.Errorf("FromContext outside a transaction = %v, want nil", got)
	}
	if got := FromContext[*fakeTx](context.WithValue(context.Background(), ctxKey{}, "not a tx"), ctxKey{}); got != nil {
		t.Errorf("FromContext of another type = %v, want nil", got)
	}
}

// respond is an idem.Func that returns resp and err and counts its runs.
func respond(runs *int, resp idem.Response, err error) idem.Func {
	return func(context.Context) (idem.Response, error) {
		*runs++
		return resp, err
	}
}

func TestRun(t *testing.T) {
	ctx := context.Background()
	run := func(s *script, policy idem.Policy, fn idem.Func) (idem.Result, error) {
		return Run(ctx, ready, policy, fn, ctxKey{}, s.attempt)
	}

	t.Run("not ready", func(t *testing.T) {
		s := newScript(ctx, step{claim: true})
		runs := 0
		_, err := Run(ctx, func(context.Context) error { return context.Canceled }, idem.DefaultPolicy,
			respond(&runs, idem.Response{}, nil), ctxKey{}, s.attempt)
		if !errors.Is(err, context.Canceled) || s.calls != 0 || runs != 0 {
			t.Errorf("Run not ready = %v after %d attempts, %d runs; want the ready error and nothing run", err, s.calls, runs)
		}
	})
	t.Run("nil fn", func(t *testing.T) {
		s := newScript(ctx, step{claim: true})
		_, err := run(s, idem.DefaultPolicy, nil)
		if !errors.Is(err, idem.ErrInvalidInput) || s.calls != 0 {
			t.Errorf("Run(nil fn) = %v after %d attempts, want ErrInvalidInput and none", err, s.calls)
		}
	})
	t.Run("kept commits", func(t *testing.T) {
		s := newScript(ctx, step{claim: true})
		var seen *fakeTx
		res, err := run(s, idem.DefaultPolicy, func(ctx context.Context) (idem.Response, error) {
			seen = FromContext[*fakeTx](ctx, ctxKey{})
			return idem.Response{Status: 201}, nil
		})
		tx := s.lastTx(t)
		if err != nil || !res.Executed || !res.Kept || res.Replayed || res.Response.Status != 201 || !res.ExpiresAt.Equal(kept.ExpiresAt) {
			t.Errorf("Run = %+v, %v; want the commit's Result, executed", res, err)
		}
		if !tx.committed || tx.rolledBack || seen != tx {
			t.Errorf("transaction %+v, fn saw %p; want it committed and in fn's context", tx, seen)
		}
	})
	t.Run("fn's context", func(t *testing.T) {
		type outer struct{}
		s := newScript(context.WithValue(ctx, outer{}, "v"), step{claim: true})
		var got any
		_, _ = run(s, idem.DefaultPolicy, func(ctx context.Context) (idem.Response, error) {
			got = ctx.Value(outer{})
			return idem.Response{}, nil
		})
		if got != "v" {
			t.Errorf("fn's context lost the attempt's values: %v", got)
		}
	})
	for _, tc := range []struct {
		name   string
		policy idem.Policy
		resp   idem.Response
		err    error
	}{
		{"released status", idem.DefaultPolicy, idem.Response{Status: 503}, nil},
		{"held", func(idem.Response, error) idem.Disposition { return idem.DispositionUncertain }, idem.Response{Status: 202}, nil},
		{"fn's error", idem.DefaultPolicy, idem.Response{Status: 299}, errFn},
		{"fn's error under a policy that keeps it", keepAll, idem.Response{Status: 299}, errFn},
	} {
		t.Run(tc.name+" rolls back", func(t *testing.T) {
			s := newScript(ctx, step{claim: true})
			runs := 0
			res, err := run(s, tc.policy, respond(&runs, tc.resp, tc.err))
			tx := s.lastTx(t)
			if err != tc.err || !res.Executed || res.Kept || res.Replayed || !res.ExpiresAt.IsZero() || res.Response.Status != tc.resp.Status {
				t.Errorf("Run = %+v, %v; want fn's response and error, executed, not kept", res, err)
			}
			if !tx.rolledBack || tx.committed || runs != 1 || s.calls != 1 {
				t.Errorf("transaction %+v, fn ran %d times in %d attempts; want one run, rolled back", tx, runs, s.calls)
			}
		})
	}
	t.Run("policy sees fn's response", func(t *testing.T) {
		s := newScript(ctx, step{claim: true})
		var saw idem.Response
		policy := func(resp idem.Response, err error) idem.Disposition {
			saw = resp
			return idem.DispositionKeep
		}
		runs := 0
		if _, err := run(s, policy, respond(&runs, idem.Response{Status: 503}, nil)); err != nil || saw.Status != 503 || !s.lastTx(t).committed {
			t.Errorf("Run = %v; policy saw %d; want 503 kept by the policy given", err, saw.Status)
		}
	})
	t.Run("answer without running fn", func(t *testing.T) {
		for _, want := range []struct {
			res idem.Result
			err error
		}{
			{idem.Result{Replayed: true, Kept: true, Response: idem.Response{Status: 201}}, nil},
			{idem.Result{}, WaitEnded("k")},
			{idem.Result{}, idem.ErrMismatch},
		} {
			s := newScript(ctx, step{res: want.res, err: want.err})
			runs := 0
			res, err := run(s, idem.DefaultPolicy, respond(&runs, idem.Response{}, nil))
			if err != want.err || res.Executed || res.Replayed != want.res.Replayed || res.Response.Status != want.res.Response.Status || runs != 0 || s.calls != 1 {
				t.Errorf("Run = %+v, %v, fn ran %d times; want %+v, %v unchanged, fn not run", res, err, runs, want.res, want.err)
			}
		}
	})
	t.Run("abort before fn is retried", func(t *testing.T) {
		s := newScript(ctx, step{retry: true, err: errAbort}, step{retry: true, err: errAbort}, step{claim: true})
		runs := 0
		res, err := run(s, idem.DefaultPolicy, respond(&runs, idem.Response{Status: 201}, nil))
		if err != nil || !res.Executed || !res.Kept || runs != 1 || s.calls != 3 {
			t.Errorf("Run = %+v, %v after %d attempts, fn ran %d times; want the third attempt's commit", res, err, s.calls, runs)
		}
	})
	t.Run("aborts before fn are bounded", func(t *testing.T) {
		s := newScript(ctx, step{retry: true, err: errAbort})
		runs := 0
		res, err := run(s, idem.DefaultPolicy, respond(&runs, idem.Response{}, nil))
		if !errors.Is(err, errAbort) || res.Executed || runs != 0 || s.calls != Retries+1 {
			t.Errorf("Run = %+v, %v after %d attempts; want the abort after %d", res, err, s.calls, Retries+1)
		}
	})
	t.Run("abort after fn is not retried", func(t *testing.T) {
		s := newScript(ctx, step{claim: true, retry: true, err: errAbort}, step{claim: true})
		runs := 0
		res, err := run(s, idem.DefaultPolicy, respond(&runs, idem.Response{Status: 201}, nil))
		if !errors.Is(err, errAbort) || res.Executed || res.Kept || runs != 1 || s.calls != 1 || !s.lastTx(t).rolledBack {
			t.Errorf("Run = %+v, %v after %d attempts, fn ran %d times; want the abort, fn run once, rolled back", res, err, s.calls, runs)
		}
	})
	t.Run("failed commit", func(t *testing.T) {
		se := &idem.StoreError{Op: "commit", Err: errors.New("connection lost")}
		s := newScript(ctx, step{claim: true, err: se})
		runs := 0
		res, err := run(s, idem.DefaultPolicy, respond(&runs, idem.Response{Status: 201}, nil))
		if err != se || res.Executed || res.Kept || runs != 1 || s.calls != 1 {
			t.Errorf("Run = %+v, %v; want the store's error, nothing kept", res, err)
		}
	})
	t.Run("panic rolls back and goes on", func(t *testing.T) {
		s := newScript(ctx, step{claim: true})
		type boom struct{}
		got := func() (v any) {
			defer func() { v = recover() }()
			_, _ = run(s, idem.DefaultPolicy, func(context.Context) (idem.Response, error) { panic(boom{}) })
			return nil
		}()
		if got != (boom{}) || !s.lastTx(t).rolledBack || s.lastTx(t).committed || s.calls != 1 {
			t.Errorf("recovered %v after %d attempts, transaction %+v; want fn's panic, one attempt, rolled back", got, s.calls, s.lastTx(t))
		}
	})
}

func TestRunner(t *testing.T) {
	type attempt struct {
		call idem.Call
		wait time.Duration
		ctx  context.Context
	}
	clock := func() time.Time { return time.Unix(7, 0) }
	newRunner := func(policy idem.Policy, wait time.Duration, calls *[]attempt) Runner[*fakeTx] {
		return NewRunner(Store[*fakeTx]{
			Ready: ready, TTL: time.Hour, Now: clock, CtxKey: ctxKey{},
			Attempt: func(ctx context.Context, call idem.Call, wait time.Duration, fn Func[*fakeTx]) (idem.Result, bool, error) {
				*calls = append(*calls, attempt{call, wait, ctx})
				return newScript(ctx, step{claim: true}).attempt(fn)
			},
		}, policy, wait)
	}

	t.Run("options", func(t *testing.T) {
		var calls []attempt
		r := newRunner(nil, 0, &calls)
		o := r.Options()
		if o.TTL != time.Hour || !o.Now().Equal(time.Unix(7, 0)) || o.Policy(idem.Response{Status: 500}, nil) != idem.DispositionRelease {
			t.Errorf("Options = %+v; want the store's TTL and clock, idem.DefaultPolicy", o)
		}
		if o.Wait != 0 || o.Heartbeat != 0 || o.CacheSize != 0 || o.Lease != 0 {
			t.Errorf("Options = %+v; want the other fields zero", o)
		}
	})
	for _, tc := range []struct{ wait, want time.Duration }{{0, DefaultWait}, {-1, 0}, {time.Second, time.Second}} {
		var calls []attempt
		r := newRunner(keepAll, tc.wait, &calls)
		type mark struct{}
		ctx := context.WithValue(context.Background(), mark{}, true)
		var seen *fakeTx
		sent := idem.Call{Key: "k", Fingerprint: fp, Route: "POST /k", Request: &idem.Request{Method: "POST"}}
		res, err := r.Run(ctx, sent, func(ctx context.Context) (idem.Response, error) {
			seen = FromContext[*fakeTx](ctx, ctxKey{})
			return idem.Response{Status: 500}, nil
		})
		if err != nil || !res.Executed || !res.Kept || seen == nil {
			t.Errorf("Do = %+v, %v; want a 500 kept by the policy given, fn in its transaction", res, err)
		}
		if len(calls) != 1 || calls[0].call != sent || calls[0].wait != tc.want || calls[0].ctx.Value(mark{}) != true {
			t.Errorf("Wait %v: attempts %+v; want one for the Call %+v with wait %v and the caller's context", tc.wait, calls, sent, tc.want)
		}
	}
	t.Run("not ready", func(t *testing.T) {
		var calls []attempt
		r := newRunner(nil, 0, &calls)
		r.st.Ready = func(context.Context) error { return idem.ErrClosed }
		if _, err := r.Run(context.Background(), idem.Call{Key: "k", Fingerprint: fp}, func(context.Context) (idem.Response, error) {
			return idem.Response{}, nil
		}); !errors.Is(err, idem.ErrClosed) || len(calls) != 0 {
			t.Errorf("Do on a closed store = %v after %d attempts, want idem.ErrClosed and none", err, len(calls))
		}
	})
}

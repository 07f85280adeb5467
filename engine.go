package idem

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// MaxStorageKeyLen is the longest storage key the engine and every store accept, in bytes: a
// scope prefix and a client key of up to MaxClientKeyLen bytes.
const MaxStorageKeyLen = 512

// MaxClientKeyLen is the longest key a client may send, in bytes (an Idempotency-Key header,
// gRPC metadata). It leaves room for a scope prefix within MaxStorageKeyLen.
const MaxClientKeyLen = 255

// Options configure an Engine. The zero value is a safe default for every field.
type Options struct {
	// Lease is how long a claim is held before another holder may take it over if this one
	// stops heartbeating (it crashed). Default 30s.
	Lease time.Duration
	// TTL is how long a completed record is kept and replayed. Default 24h. At least Lease.
	TTL time.Duration
	// Heartbeat is how often the lease is extended while the effect runs. Default Lease/3;
	// negative disables heartbeats. Extensions go on for as long as the effect runs, even
	// after the caller's context ended (an effect may outlive its caller, as a detached call
	// does), and stop as soon as it returns. An extension comes sooner when less than two
	// heartbeats of the lease are left, and a claim that took so long to land that less than
	// two heartbeats (or half its lease) are left is extended before the effect starts.
	Heartbeat time.Duration
	// Wait is how long an in-flight duplicate waits for the original to finish and then
	// replays it. Default 0: fail fast with ErrInFlight.
	Wait time.Duration
	// PollInterval is the first pause between looks at the store while waiting; it doubles up
	// to 16 times its value. Waiters in the same process are woken at once. Default 20ms.
	PollInterval time.Duration
	// Policy decides which outcomes are kept, released or held. Default DefaultPolicy.
	Policy Policy
	// Uncertain says what happens to a claim held as uncertain. Default UncertainExpire.
	Uncertain UncertainPolicy
	// CacheSize is how many completed records a bounded local LRU keeps to serve hot replays
	// without a store round trip. Default 0: no cache. In-progress records are never cached.
	// A completed record does not change until it expires, so a cached replay is as good as
	// the store's; the one exception is an operator deleting a completed record
	// (idem release --force), which other processes' caches do not see until it expires.
	CacheSize int
	// CacheBytes bounds the memory of the cache (bodies, headers, keys). Default 64 MiB when
	// CacheSize is set. A record larger than an eighth of it is not cached.
	CacheBytes int64
	// CacheOnComplete fills the cache with each result as it is stored, so the first duplicate
	// that reaches this process is answered without a store round trip. For processes that see
	// most of their own duplicates (a Lambda function instance retried in place, a consumer
	// whose broker redelivers to it), at the cost of cache space for keys never replayed.
	// Default false: the cache is filled by the first replay read from the store. Without
	// CacheSize it does nothing.
	CacheOnComplete bool
	// StoreTimeout bounds the store calls made after the effect ran (complete, release),
	// which run detached from the caller's context so a caller that gives up does not lose
	// the result. Complete is retried on store errors within it. Default 10s.
	StoreTimeout time.Duration
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Logger receives warnings (a lost lease, a failed release, a lease extension that failed,
	// and, at Info, the extension that succeeded after it). Default slog.Default().
	Logger *slog.Logger
	// Observer is told when each stage of Do begins and ends (claim, wait, effect, complete,
	// release), for tracing and metrics; see package idemotel for OpenTelemetry. Default nil:
	// nothing is observed, at the cost of a nil check per stage.
	Observer Observer
}

// Engine runs effects at most once per key. It is safe for concurrent use; create one per
// store with New and share it. The zero Engine is not usable (Do panics on it): create it
// with New.
type Engine struct {
	store Store
	opt   Options
	cache *lru
	wake  waiters
}

// New returns an Engine over store. It fails with an *OptionError (matching ErrInvalidInput)
// naming the field if an option is out of range.
func New(store Store, opt Options) (*Engine, error) {
	if store == nil {
		return nil, optionError("store", "is nil")
	}
	opt.Lease = cmp.Or(opt.Lease, 30*time.Second)
	opt.TTL = cmp.Or(opt.TTL, 24*time.Hour)
	opt.Heartbeat = cmp.Or(opt.Heartbeat, opt.Lease/3)
	opt.PollInterval = cmp.Or(opt.PollInterval, 20*time.Millisecond)
	opt.StoreTimeout = cmp.Or(opt.StoreTimeout, 10*time.Second)
	if opt.Policy == nil {
		opt.Policy = DefaultPolicy
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	switch {
	case opt.Lease < time.Millisecond:
		return nil, optionError("Options.Lease", "%s is below 1ms", opt.Lease)
	case opt.TTL < opt.Lease:
		return nil, optionError("Options.TTL", "%s is shorter than Options.Lease %s", opt.TTL, opt.Lease)
	case opt.Heartbeat >= opt.Lease:
		return nil, optionError("Options.Heartbeat", "%s must be shorter than Options.Lease %s", opt.Heartbeat, opt.Lease)
	case opt.Wait < 0:
		return nil, optionError("Options.Wait", "%s is negative", opt.Wait)
	case opt.PollInterval < 0:
		return nil, optionError("Options.PollInterval", "%s is negative", opt.PollInterval)
	case opt.StoreTimeout < 0:
		return nil, optionError("Options.StoreTimeout", "%s is negative", opt.StoreTimeout)
	case opt.CacheSize < 0:
		return nil, optionError("Options.CacheSize", "%d is negative", opt.CacheSize)
	case opt.CacheBytes < 0:
		return nil, optionError("Options.CacheBytes", "%d is negative", opt.CacheBytes)
	case opt.Uncertain > UncertainHold:
		return nil, optionError("Options.Uncertain", "%d is not a known policy", opt.Uncertain)
	}
	e := &Engine{store: store, opt: opt}
	if opt.CacheSize > 0 {
		e.cache = newLRU(opt.CacheSize, cmp.Or(opt.CacheBytes, 64<<20))
	}
	return e, nil
}

// Store returns the engine's store.
func (e *Engine) Store() Store { return e.store }

// Options returns the engine's options with defaults filled in.
func (e *Engine) Options() Options { return e.opt }

// Func is an effect. Its context is cancelled when the caller's is, or with cause ErrLeaseLost
// when the claim was taken over or is about to lapse because the store did not answer the
// heartbeat's extensions for the whole lease (another process may then take the key over). It returns the response to keep and replay, or an error
// (wrap it with Uncertain if the effect may have happened).
type Func func(ctx context.Context) (Response, error)

// Result is the outcome of Engine.Do.
type Result struct {
	// Response is the effect's response, or the stored one on a replay. Treat it as read-only:
	// replays may share it.
	Response Response
	// Replayed is true when the response is the stored one and the effect did not run now.
	Replayed bool
	// Executed is true when the effect ran in this call and returned (with or without an
	// error). With a nil error from fn and an error from Do, the effect happened but its
	// result could not be recorded: do not report it as "nothing happened".
	Executed bool
	// Kept is true when the response is stored for replay (always on a replay).
	Kept bool
	// Takeover is true when this execution took over a claim whose holder's lease had expired.
	Takeover bool
	// ExpiresAt is when the stored response stops being replayed; zero when nothing is kept.
	ExpiresAt time.Time
}

// Do runs fn at most once for key, or replays its stored response. It is Run's short form,
// for a call that keeps no route and no request with the record:
// Run(ctx, Call{Key: key, Fingerprint: fingerprint}, fn).
func (e *Engine) Do(ctx context.Context, key, fingerprint string, fn Func) (Result, error) {
	return e.Run(ctx, Call{Key: key, Fingerprint: fingerprint}, fn)
}

// Run runs fn at most once for call.Key, or replays its stored response.
//
// call.Key is the scoped storage key (1 to MaxStorageKeyLen bytes of UTF-8 without NUL);
// call.Fingerprint identifies the request (see Fingerprint). The record keeps call.Route,
// cleaned as Call says, and call.Request when the key is claimed. Run returns:
//   - the executed or replayed Result and a nil error;
//   - an error matching ErrMismatch if the key was used with another fingerprint;
//   - an *InFlightError (ErrInFlight) if another holder runs the effect now and Options.Wait
//     is zero or ran out;
//   - a *StoreError (ErrStoreUnavailable) if the store failed before the effect ran: no
//     effect ran;
//   - fn's error, after releasing the claim (or holding it, for an uncertain outcome);
//   - the Result together with an error matching ErrLeaseLost or ErrStoreUnavailable if fn
//     ran but its result could not be recorded.
//
// A panic in fn releases the claim and is re-panicked.
func (e *Engine) Run(ctx context.Context, call Call, fn Func) (Result, error) {
	if e == nil || e.store == nil {
		panic("idem: Run on an Engine not created with New: create it with New")
	}
	key, fingerprint := call.Key, call.Fingerprint
	if err := checkArgs(key, fingerprint, fn); err != nil {
		return Result{}, err
	}
	var claim, wait observation
	cctx := e.observe(ctx, StageClaim, key, &claim)
	if e.cache != nil {
		if rec, ok := e.cache.get(key, e.opt.Now); ok {
			res, err := e.fromRecord(&rec, fingerprint)
			claim.end(Event{Stage: StageClaim, Key: key, Outcome: answered(err), Err: err, Cached: true})
			return res, err
		}
	}
	var deadline time.Time
	var pause time.Duration
	for {
		if err := ctx.Err(); err != nil {
			endClaim(&claim, &wait, Event{Key: key, Outcome: OutcomeCanceled, Err: err})
			return Result{}, err
		}
		now := e.opt.Now()
		res, err := e.reserve(cctx, &call, now)
		if err != nil {
			err := storeError("reserve", err)
			endClaim(&claim, &wait, Event{Key: key, Outcome: OutcomeStoreError, Err: err})
			return Result{}, err
		}
		if res.Claimed {
			if err := e.freshLease(cctx, key, &res.Record, now); err != nil {
				if errors.Is(err, ErrLeaseLost) {
					continue // taken over or released meanwhile: look at the key again
				}
				endClaim(&claim, &wait, Event{Key: key, Outcome: OutcomeStoreError, Err: err})
				return Result{}, err
			}
			endClaim(&claim, &wait, Event{Key: key, Outcome: OutcomeNew, Takeover: res.Takeover,
				Attempt: res.Record.Attempts, Lease: e.opt.Lease})
			return e.execute(ctx, key, res, fn)
		}
		rec := &res.Record
		if rec.Fingerprint != fingerprint || rec.State == StateCompleted {
			if rec.State == StateCompleted && e.cache != nil && rec.Fingerprint == fingerprint {
				e.cache.put(*rec)
			}
			result, err := e.fromRecord(rec, fingerprint)
			endClaim(&claim, &wait, Event{Key: key, Outcome: answered(err), Err: err})
			return result, err
		}
		// In flight elsewhere, with the same fingerprint.
		if e.opt.Wait == 0 {
			err := e.inFlight(rec, now)
			endClaim(&claim, &wait, Event{Key: key, Outcome: OutcomeInFlight, Err: err})
			return Result{}, err
		}
		if deadline.IsZero() {
			deadline = time.Now().Add(e.opt.Wait)
			pause = e.opt.PollInterval
			e.observe(cctx, StageWait, key, &wait)
		}
		left := time.Until(deadline)
		if left <= 0 {
			err := e.inFlight(rec, e.opt.Now())
			endClaim(&claim, &wait, Event{Key: key, Outcome: OutcomeInFlight, Err: err})
			return Result{}, err
		}
		if err := e.wake.wait(ctx, key, min(pause, left)); err != nil {
			endClaim(&claim, &wait, Event{Key: key, Outcome: OutcomeCanceled, Err: err})
			return Result{}, err
		}
		pause = min(pause*2, e.opt.PollInterval*16)
	}
}

// reserve claims call's key with its route, cleaned, and its request.
func (e *Engine) reserve(ctx context.Context, call *Call, now time.Time) (Reservation, error) {
	return e.store.Reserve(ctx, ReserveRequest{Key: call.Key, Fingerprint: call.Fingerprint, Route: cleanRoute(call.Route),
		Now: now, Lease: e.opt.Lease, TTL: e.opt.TTL, Request: call.Request})
}

// freshLease makes sure a claim still holds enough of its lease for the effect to start under
// it. A claim's lease runs from claimedAt, the time taken before Reserve, so a Reserve that
// was slow to land (a store restarting, a saturated connection pool, a paused process) may
// return with less of it left than the heartbeat counts on, and another process could take
// the key over while the effect runs. Such a claim is extended, by the lease the store granted,
// before the effect starts: on ErrLeaseLost (taken over or released meanwhile) the effect must
// not start; on a store error the claim is given back and the effect does not start either. A
// claim that landed at once costs nothing here.
func (e *Engine) freshLease(ctx context.Context, key string, rec *Record, claimedAt time.Time) error {
	if rec.LeaseUntil.IsZero() {
		return nil // a store that does not report the claim's lease
	}
	// The lease granted may be shorter than Options.Lease (a store wrapper bounding it). The
	// heartbeat's first extension comes a heartbeat after the effect starts, so a claim must
	// still hold at least two heartbeats of it; without a heartbeat, half of it.
	granted := rec.LeaseUntil.Sub(claimedAt)
	need := granted / 2
	if e.opt.Heartbeat > 0 {
		need = min(need, 2*e.opt.Heartbeat)
	}
	for range 3 {
		now := e.opt.Now()
		if rec.LeaseUntil.Sub(now) >= need {
			return nil
		}
		until := now.Add(granted)
		sctx, cancel := e.detached(ctx)
		err := e.store.Extend(sctx, key, rec.Token, until)
		cancel()
		switch {
		case errors.Is(err, ErrLeaseLost):
			e.opt.Logger.Warn("idem: claim lost before the effect started; not run", "key", key)
			return err
		case err != nil:
			e.release(ctx, key, rec.Token)
			e.wake.done(key)
			return storeError("extend", err)
		}
		rec.LeaseUntil = until
	}
	// Every extension landed too late to leave a lease worth starting under.
	e.release(ctx, key, rec.Token)
	e.wake.done(key)
	return storeError("extend", fmt.Errorf("the store answered too slowly to hold a lease of %s", granted))
}

// answered is the claim outcome of an answer from an existing record.
func answered(err error) Outcome {
	if err != nil {
		return OutcomeMismatch
	}
	return OutcomeReplay
}

// endClaim ends the wait (if one began) and then the claim, both with ev's outcome. Without an
// observer it is one inlined nil check.
func endClaim(claim, wait *observation, ev Event) {
	if claim.o != nil {
		endObserved(claim, wait, ev)
	}
}

func endObserved(claim, wait *observation, ev Event) {
	ev.Stage = StageWait
	wait.end(ev)
	ev.Stage = StageClaim
	claim.end(ev)
}

func checkArgs(key, fingerprint string, fn Func) error {
	if err := CheckKey(key); err != nil {
		return err
	}
	switch {
	case !ValidFingerprint(fingerprint):
		return invalid("fingerprint %.80q is not %d lowercase hex digits", fingerprint, FingerprintLen)
	case fn == nil:
		return invalid("nil function")
	}
	return nil
}

// fromRecord answers from an existing record that was not claimed.
func (e *Engine) fromRecord(rec *Record, fingerprint string) (Result, error) {
	if rec.Fingerprint != fingerprint {
		return Result{}, fmt.Errorf("%w (key %.80q)", ErrMismatch, rec.Key)
	}
	var resp Response
	if rec.Response != nil {
		resp = *rec.Response
	}
	return Result{Response: resp, Replayed: true, Kept: true, ExpiresAt: rec.ExpiresAt}, nil
}

// inFlight returns the error for a key in flight elsewhere, with an estimate of when its answer
// will exist (see InFlightError.RetryAfter).
func (e *Engine) inFlight(rec *Record, now time.Time) error {
	after := min(now.Sub(rec.CreatedAt), rec.LeaseUntil.Sub(now))
	if e.opt.Heartbeat > 0 {
		after = min(after, e.opt.Heartbeat)
	}
	// Round up to whole seconds: Retry-After has second resolution.
	after = max(time.Second, (after+time.Second-1)/time.Second*time.Second)
	return &InFlightError{Key: rec.Key, RetryAfter: after}
}

// execute runs fn under the claim in res and records its outcome.
func (e *Engine) execute(ctx context.Context, key string, res Reservation, fn Func) (result Result, err error) {
	token := res.Record.Token
	var effect observation
	ctx = e.observe(ctx, StageEffect, key, &effect)
	ev := Event{Stage: StageEffect, Key: key, Takeover: res.Takeover, Attempt: res.Record.Attempts, Lease: e.opt.Lease}
	fnCtx := newEffectContext(ctx)
	defer fnCtx.finish()
	hb := e.heartbeat(fnCtx, key, token, res.Record.LeaseUntil)
	finished := false
	defer func() {
		if finished {
			return
		}
		// fn panicked: release the claim, then let the panic go on.
		hb.stop()
		e.release(ctx, key, token)
		e.wake.done(key)
		ev.Outcome = OutcomePanic
		effect.end(ev)
	}()
	resp, ferr := fn(fnCtx)
	finished = true
	defer e.wake.done(key)

	result = Result{Response: resp, Executed: true, Takeover: res.Takeover}
	policy := e.opt.Policy(resp, ferr)
	if policy != DispositionKeep || ferr != nil {
		// Stopped before the claim is held or released: an extension after a hold would
		// shorten the hold to one lease.
		hb.stop()
	}
	switch policy {
	case DispositionKeep:
		if ferr != nil {
			// A policy may keep a response that came with an error; the error still goes
			// back to the caller.
			break
		}
		now := e.opt.Now()
		expires := now.Add(e.opt.TTL)
		// The heartbeat goes on until the result is stored: the effect has run, and a store
		// that is slow to take the result (down for a moment, a pool reconnecting) must not
		// let the lease lapse meanwhile, or another process would run the effect again.
		hb.settle()
		err := e.complete(ctx, key, token, resp, now, expires)
		hb.stop()
		if err != nil {
			ev.Outcome, ev.Err = storeOutcome(err), err
			effect.end(ev)
			return result, err
		}
		// Unless asked, the cache is filled by the first replay read from the store, not here:
		// most keys are never replayed, and the new-key path stays free of it.
		if e.opt.CacheOnComplete && e.cache != nil {
			stored := resp
			e.cache.put(Record{Key: key, Fingerprint: res.Record.Fingerprint, State: StateCompleted, Token: token,
				Attempts: res.Record.Attempts, Starts: res.Record.Starts, Response: &stored, CreatedAt: res.Record.CreatedAt, CompletedAt: now,
				ExpiresAt: expires, Route: res.Record.Route, Request: res.Record.Request})
		}
		result.Kept, result.ExpiresAt = true, expires
		ev.Outcome = OutcomeKept
		effect.end(ev)
		return result, nil
	case DispositionUncertain:
		e.hold(ctx, key, token, res.Record.ExpiresAt)
		if ferr == nil {
			ferr = Uncertain(nil)
		} else if !errors.Is(ferr, ErrUncertain) {
			ferr = Uncertain(ferr)
		}
		ev.Outcome, ev.Err = OutcomeUncertain, ferr
		effect.end(ev)
		return result, ferr
	}
	e.release(ctx, key, token)
	ev.Outcome, ev.Err = OutcomeReleased, ferr
	effect.end(ev)
	return result, ferr
}

// storeOutcome is the outcome of a store call that returned err.
func storeOutcome(err error) Outcome {
	switch {
	case err == nil:
		return OutcomeOK
	case errors.Is(err, ErrLeaseLost):
		return OutcomeLeaseLost
	}
	return OutcomeStoreError
}

// detached returns a context for store calls after fn: not cancelled with the caller's, but
// bounded by StoreTimeout.
func (e *Engine) detached(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), e.opt.StoreTimeout)
}

// complete stores resp under the claim, observed as StageComplete.
func (e *Engine) complete(ctx context.Context, key string, token int64, resp Response, now, expires time.Time) error {
	var ob observation
	ctx = e.observe(ctx, StageComplete, key, &ob)
	err := e.completeStore(ctx, key, token, resp, now, expires)
	ob.end(Event{Stage: StageComplete, Key: key, Outcome: storeOutcome(err), Err: err})
	return err
}

func (e *Engine) completeStore(ctx context.Context, key string, token int64, resp Response, now, expires time.Time) error {
	// First with the caller's context while it lasts (no allocation on the common path);
	// if that fails for any reason but a lost lease, again detached and bounded.
	if ctx.Err() == nil {
		err := e.store.Complete(ctx, key, token, resp, now, expires)
		if err == nil {
			return nil
		}
		if errors.Is(err, ErrLeaseLost) {
			return e.lostOnComplete(ctx, key, token)
		}
	}
	sctx, cancel := e.detached(ctx)
	defer cancel()
	backoff := 10 * time.Millisecond
	for {
		err := e.store.Complete(sctx, key, token, resp, e.opt.Now(), expires)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, ErrLeaseLost):
			return e.lostOnComplete(sctx, key, token)
		}
		t := time.NewTimer(backoff)
		select {
		case <-sctx.Done():
			t.Stop()
			e.opt.Logger.Error("idem: effect ran but its result could not be stored; the key stays in flight until its lease runs out",
				"key", key, "err", err)
			return storeError("complete", err)
		case <-t.C:
		}
		backoff = min(backoff*2, time.Second)
	}
}

// lostOnComplete answers a Complete refused as lease lost. Over a network a Complete can land
// while its answer is lost; the client's retry is then refused although the record is ours and
// completed. So the record is read back: completed with our token means it was stored.
func (e *Engine) lostOnComplete(ctx context.Context, key string, token int64) error {
	if ctx.Err() != nil {
		var cancel context.CancelFunc
		ctx, cancel = e.detached(ctx)
		defer cancel()
	}
	if rec, err := e.store.Get(ctx, key); err == nil && rec.State == StateCompleted && rec.Token == token {
		return nil
	}
	e.opt.Logger.Warn("idem: effect ran but its claim was taken over; result not stored", "key", key)
	return fmt.Errorf("complete %.80q: %w", key, ErrLeaseLost)
}

func (e *Engine) release(ctx context.Context, key string, token int64) {
	var ob observation
	ctx = e.observe(ctx, StageRelease, key, &ob)
	sctx, cancel := e.detached(ctx)
	defer cancel()
	err := e.store.Release(sctx, key, token)
	ob.end(Event{Stage: StageRelease, Key: key, Outcome: storeOutcome(err), Err: err})
	if err != nil && !errors.Is(err, ErrLeaseLost) {
		e.opt.Logger.Warn("idem: could not release claim; the key stays in flight until its lease runs out",
			"key", key, "err", err)
	}
}

// hold applies the UncertainPolicy to a claim whose outcome is uncertain.
func (e *Engine) hold(ctx context.Context, key string, token int64, expires time.Time) {
	switch e.opt.Uncertain {
	case UncertainRelease:
		e.release(ctx, key, token)
	case UncertainHold:
		sctx, cancel := e.detached(ctx)
		defer cancel()
		if err := e.store.Extend(sctx, key, token, expires); err != nil {
			e.opt.Logger.Warn("idem: could not pin uncertain claim", "key", key, "err", err)
		}
	}
	e.opt.Logger.Warn("idem: outcome uncertain; key held", "key", key, "policy", e.opt.Uncertain)
}

// heartbeat extends the lease every Heartbeat while fn runs, and for exactly as long, whatever
// happens to the caller's context meanwhile. If the claim is lost, fn's
// context is cancelled with cause ErrLeaseLost. It costs one timer, not a goroutine, per call,
// and the timers are reused; stop (nil-safe) stops it and waits for an extension under way, so
// no late extension can reach the store after the claim is completed or released.
func (e *Engine) heartbeat(ctx *effectContext, key string, token int64, until time.Time) *beat {
	if e.opt.Heartbeat <= 0 {
		return nil
	}
	b, _ := beats.Get().(*beat)
	if b == nil {
		b = new(beat)
		b.t = time.AfterFunc(time.Hour, b.fire)
		b.t.Stop()
	}
	b.mu.Lock()
	if until.IsZero() {
		until = e.opt.Now().Add(e.opt.Lease) // a store that does not report the claim's lease
	}
	b.e, b.ctx, b.key, b.token, b.stopped, b.until, b.failed = e, ctx, key, token, false, until, 0
	b.settling.Store(false)
	b.schedule(e.nextBeat(until))
	b.mu.Unlock()
	return b
}

// beats holds stopped heartbeats for reuse: a timer and its callback cost two allocations.
var beats sync.Pool

type beat struct {
	e     *Engine
	ctx   *effectContext
	key   string
	token int64

	mu      sync.Mutex // held across an extension, so stop waits for it
	stopped bool
	until   time.Time   // end of the lease as last extended (or claimed)
	due     time.Time   // when the timer is due to call fire, by the engine's clock
	failed  int         // extensions that failed in a row
	t       *time.Timer // calls fire
	// settling is set once the effect has returned and its result is being stored.
	settling atomic.Bool
}

func (b *beat) fire() {
	b.mu.Lock()
	defer b.mu.Unlock()
	// Only stop ends the heartbeat: the caller going away does not end the effect (a
	// detached upstream call goes on), so it must not let the lease lapse under it.
	if b.stopped {
		return
	}
	e := b.e
	// An extension waits at most half a heartbeat, and no more than half of the lease it
	// still holds; one that failed (the store did not answer) is tried again after an eighth
	// of a heartbeat. So a store that stops answering for less than the lease does not let
	// the lease lapse under a running effect: the attempts get shorter as the lease runs
	// down, and the first one after the store is back renews it.
	now := e.opt.Now()
	if lapsed, stalled := now.Sub(b.until), now.Sub(b.due); lapsed > 0 && stalled >= lapsed {
		// The heartbeat was due in time but ran after the lease had ended: this process was
		// not scheduled (stopped, starved of CPU, swapped out, a long pause of the machine).
		// (An extension tried again after the lease had lapsed, the store not answering, was
		// due after the lease's end: that is no stall, and the failure has its own warning.)
		// Another process may have taken the key over and run the effect meanwhile; the
		// extension below finds out (ErrLeaseLost cancels the effect). Say so either way: it
		// is the one trace such a stall leaves.
		e.opt.Logger.Warn("idem: lease lapsed while this process was stalled", "key", b.key, "stalled", stalled.Round(time.Millisecond), "lapsed", lapsed.Round(time.Millisecond))
	}
	wait := min(e.opt.Heartbeat/2, max(b.until.Sub(now)/2, e.opt.Heartbeat/8, time.Millisecond))
	// Nor past the point where the claim is given up (lapseMargin), so that a store that
	// hangs cannot hold the effect running after its lease has lapsed.
	wait = min(wait, max(b.until.Sub(now)-e.lapseMargin(), time.Millisecond))
	until := now.Add(e.opt.Lease)
	sctx, c := context.WithTimeout(context.WithoutCancel(b.ctx), wait)
	err := e.store.Extend(sctx, b.key, b.token, until)
	c()
	switch {
	case errors.Is(err, ErrLeaseLost):
		if !b.settling.Load() {
			// Once the result is being stored, a completed record refuses the extension
			// too; the completion itself reports a lease that was really lost.
			e.opt.Logger.Warn("idem: lease lost while the effect ran", "key", b.key)
			b.ctx.lose()
		}
		return
	case err != nil:
		left := b.until.Sub(e.opt.Now())
		if left <= e.lapseMargin() && !b.settling.Load() {
			// The store has not answered for the whole lease: by this process's clock the
			// claim is about to lapse, and another process may take the key over and run the
			// effect. This one must stop as it would on a lost lease, before that can happen.
			e.opt.Logger.Warn("idem: lease lapsed while the store did not answer; cancelling the effect", "key", b.key, "err", err, "failed", b.failed+1)
			b.ctx.lose()
			return
		}
		if b.failed++; b.failed == 1 {
			e.opt.Logger.Warn("idem: lease extension failed; trying again", "key", b.key, "err", err, "lease_left", left.Round(time.Millisecond))
		}
		// Try again soon, and in any case once more just before the lease would lapse.
		next := max(e.opt.Heartbeat/8, time.Millisecond)
		if until := left - e.lapseMargin(); until > 0 && until < next {
			next = until
		}
		b.schedule(next)
		return
	}
	if b.failed > 0 {
		e.opt.Logger.Info("idem: lease extended after failed attempts", "key", b.key, "failed", b.failed, "lease_left", b.until.Sub(now).Round(time.Millisecond))
		b.failed = 0
	}
	b.until = until
	b.schedule(e.nextBeat(until))
}

// schedule sets the timer to call fire after d, and notes when that is due. b.mu is held.
func (b *beat) schedule(d time.Duration) {
	b.due = b.e.opt.Now().Add(d)
	b.t.Reset(d)
}

// lapseMargin is how long before the end of its lease, by its own clock, a claim whose
// extensions keep failing is given up (the effect's context cancelled with ErrLeaseLost): a
// quarter of the heartbeat (2.5s of the default 30s lease), so that clocks a little apart do
// not let another process take the key over while the effect still runs here.
func (e *Engine) lapseMargin() time.Duration {
	return max(e.opt.Heartbeat/4, time.Millisecond)
}

// nextBeat is when the next extension of a lease that ends at until is due: a heartbeat from
// now, or sooner, at half the time left, when less than two heartbeats are left (an extension
// that was slow to land).
func (e *Engine) nextBeat(until time.Time) time.Duration {
	return min(e.opt.Heartbeat, max(until.Sub(e.opt.Now())/2, time.Millisecond))
}

// settle notes that the effect has returned and its result is being stored: the heartbeat
// goes on, but a lease it finds lost is the completion's to report.
func (b *beat) settle() {
	if b != nil {
		b.settling.Store(true)
	}
}

func (b *beat) stop() {
	if b == nil {
		return
	}
	b.mu.Lock()
	b.stopped = true
	// Stop reports true only when fire was pending and now never runs; otherwise fire may
	// still be on its way to the lock, and b must not be reused under it.
	idle := b.t.Stop()
	b.e, b.ctx, b.key = nil, nil, ""
	b.mu.Unlock()
	if idle {
		beats.Put(b)
	}
}

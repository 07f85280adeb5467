package idemlambda

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/idemkit/idem"
)

// ErrMissingKey: the event has no value at Options.KeyPath (or at one of Options.KeyPaths), or
// only one that carries nothing, and Options.RequireKey is set. The handler did not run.
var ErrMissingKey = errors.New("idemlambda: no idempotency key in the event")

// optionError reports an invalid option as an *idem.OptionError raised by idemlambda.
func optionError(field, format string, args ...any) error {
	return &idem.OptionError{Package: "idemlambda", Field: field, Problem: fmt.Sprintf(format, args...)}
}

// ErrReleaseFailed is joined (errors.Join) to the handler's error when the handler failed and
// its claim could not be released: the key stays in flight until the claim's lease runs out, so
// a retry before then fails with idem.ErrInFlight (or waits, with the engine's Wait) instead of
// running the handler. The store's error is in the message. It does not match
// idem.ErrStoreUnavailable: the handler did run.
var ErrReleaseFailed = errors.New("idemlambda: the failed invocation's claim could not be released; the key stays in flight until its lease runs out")

// DisabledEnv is the environment variable that turns idempotency off, for local runs and unit
// tests without a store: set to 1 (or true), every wrapper runs its handler on every event, as
// if the event had no key, and Options.Runner (ProxyOptions.Runner) may be nil. Keys are still
// read, so RequireKey and malformed keys fail as they would with a store. Every Wrap,
// WrapAPIGateway and WrapHTTPAPI logs a warning when it is set, once per cold start. It is
// refused (the wrapper fails with an *idem.OptionError) inside AWS Lambda, where AWS_LAMBDA_FUNCTION_NAME
// is set, unless AWS_SAM_LOCAL is set too (sam local invoke, sam local start-api): a deployed
// function never runs with duplicates let through.
const DisabledEnv = "IDEMLAMBDA_DISABLED"

// disabled reads DisabledEnv: whether idempotency is off, or an error if it is set in a deployed
// Lambda function or to something that is not a boolean.
func disabled(logger *slog.Logger) (bool, error) {
	v := os.Getenv(DisabledEnv)
	if v == "" {
		return false, nil
	}
	off, err := strconv.ParseBool(v)
	switch {
	case err != nil:
		return false, optionError(DisabledEnv, "%q is not a boolean", v)
	case !off:
		return false, nil
	case os.Getenv("AWS_LAMBDA_FUNCTION_NAME") != "" && os.Getenv("AWS_SAM_LOCAL") == "":
		return false, optionError(DisabledEnv, "is set in a deployed Lambda function (AWS_LAMBDA_FUNCTION_NAME is set, AWS_SAM_LOCAL is not); it is for local runs and tests only")
	}
	logger.Warn("idemlambda: " + DisabledEnv + " is set: idempotency is OFF, duplicate events run the handler again; for local runs and tests only")
	return true, nil
}

// Options configure Wrap. Runner and KeyPath (or KeyPaths) are required.
type Options struct {
	// Runner runs the handler at most once per key and stores its result: an *idem.Engine, or
	// a transactional runner (pgstore.TxRunner, …), whose claims are then not bounded by the
	// invocation's deadline (LeaseMargin does not apply). Its TTL is how long
	// results are replayed; its Wait lets a duplicate invocation wait for the first one's
	// result instead of failing with idem.ErrInFlight; its CacheSize keeps results in the
	// function instance's memory, filled as each result is stored, so a duplicate that reaches
	// the same instance is answered without a store call. Required, unless DisabledEnv is set.
	Runner idem.Runner
	// KeyPath says where the key is in the event: a path into the event's JSON encoding, its
	// segments separated by dots ("detail.order_id", "body.order_id", "Records.0.messageId"),
	// or "." for the whole event. A segment of digits indexes an array. A string that holds
	// JSON (the body of an API Gateway request, of an SQS message) is decoded when the path goes
	// on into it. Two events share a key only if they hold the same JSON value there: the
	// number 5 and the string "5" are two keys, as are true and "true"; 5 and 5.0 are one;
	// objects are compared field by field, in any order. A value that carries nothing (null,
	// "", {}, [], an array or object of such values) is no key: see RequireKey. Choose what
	// identifies the business fact and stays the same on every retry: never a per-delivery
	// field such as an API Gateway request id. KeyPath or KeyPaths is required.
	KeyPath string
	// KeyPaths makes the key of several values, for a fact one field does not identify alone
	// (the user and the order, when order ids are per user): two events share a key only if
	// they hold the same value at every path. An event missing a value at any of them (or
	// holding one that carries nothing) has no key, as one missing KeyPath: a partial key
	// would merge the events of everyone missing that field. Set KeyPath or KeyPaths, not both.
	KeyPaths []string
	// FingerprintPath says which part of the event must be the same for a second event with
	// the key to count as a duplicate (same syntax; "." for the whole event). An event with the
	// key and another value there fails with idem.ErrMismatch and the handler does not run.
	// Default "": only the key is compared.
	FingerprintPath string
	// Name keeps the keys of different functions apart: the storage key is Name, '|', key.
	// Default: the function's name (the AWS_LAMBDA_FUNCTION_NAME environment variable), or
	// "lambda" where it is not set. It is the key's scope (idem.ScopedKey), so it must be a
	// valid one (idem.CheckScope): no '|', no control characters, at most idem.MaxScopeLen bytes.
	// It is also the route the records carry (idem.Record.Route), shown by `idem list` and the
	// operator console.
	Name string
	// RequireKey makes an event without a key fail with ErrMissingKey. Default false: the
	// handler runs for it without protection, and a warning is logged.
	RequireKey bool
	// LeaseMargin is how long after the invocation's deadline its claim still holds: a claim's
	// lease is at most the time left before the deadline (ctx.Deadline(), which Lambda sets)
	// plus LeaseMargin, and at most the engine's Options.Lease, so the claim of an invocation
	// that timed out is free for the retry soon after, never before it is stopped. Default
	// DefaultLeaseMargin (see there why it can be small); negative leaves the engine's lease as
	// it is.
	LeaseMargin time.Duration
	// Logger receives warnings. Default slog.Default().
	Logger *slog.Logger
	// OnEvent, if set, is called once per invocation, as the wrapped handler returns, with
	// what happened to the event (for metrics and logs). Spans come from the runner's
	// idem.Options.Observer. Default nil.
	OnEvent func(Event)
}

// Wrap returns handler made idempotent, to pass to lambda.Start: an event whose key (found at
// Options.KeyPath) was seen before gets the stored result instead of a second run. It fails
// with an *idem.OptionError (matching idem.ErrInvalidInput) naming the field if an option is invalid.
//
// The result is stored as JSON and a replay is decoded from it (see idem.DoJSON for what JSON
// keeps); Lambda returns results as JSON anyway, so the caller gets the same bytes. An error
// from the handler releases the key, so a retry runs it again (Lambda retries asynchronous
// invocations on error); a panic releases it too. If that release fails, the error returned is
// the handler's joined with one matching ErrReleaseFailed. A duplicate while the first runs gets
// an error matching idem.ErrInFlight unless the engine's Wait covers it, a second event with
// the key but another FingerprintPath value one matching idem.ErrMismatch, and a store that
// cannot be reached one matching idem.ErrStoreUnavailable, without running the handler. These
// are the errors AWS Lambda Powertools raises as IdempotencyAlreadyInProgressError and
// IdempotencyValidationError: match them with errors.Is.
//
// The claim's lease is bounded by the invocation's deadline (see Options.LeaseMargin).
func Wrap[In, Out any](opt Options, handler func(ctx context.Context, event In) (Out, error)) (func(ctx context.Context, event In) (Out, error), error) {
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	off, err := disabled(opt.Logger)
	switch {
	case err != nil:
		return nil, err
	case (opt.Runner == nil || opt.Runner == (*idem.Engine)(nil)) && !off:
		return nil, optionError("Options.Runner", "is required")
	case handler == nil:
		return nil, optionError("handler", "is nil")
	case opt.KeyPath != "" && len(opt.KeyPaths) > 0:
		return nil, optionError("Options.KeyPath", "and Options.KeyPaths are both set")
	}
	names := opt.KeyPaths
	field := "Options.KeyPaths"
	if len(names) == 0 {
		names, field = []string{opt.KeyPath}, "Options.KeyPath"
	}
	keys := make([][]string, len(names))
	for i, p := range names {
		if keys[i], err = parsePath(p); err != nil || p == "" {
			return nil, optionError(field, "%q: %v", p, cmpErr(err, "required"))
		}
	}
	var fp []string
	if opt.FingerprintPath != "" {
		if fp, err = parsePath(opt.FingerprintPath); err != nil {
			return nil, optionError("Options.FingerprintPath", "%q: %v", opt.FingerprintPath, err)
		}
	}
	if opt.Name == "" {
		opt.Name = os.Getenv("AWS_LAMBDA_FUNCTION_NAME")
	}
	if opt.Name == "" {
		opt.Name = "lambda"
	}
	if err := idem.CheckScope(opt.Name); err != nil {
		return nil, optionError("Options.Name", "%q: %v", opt.Name, err)
	}
	var lease *leaser
	if !off {
		if lease, err = newLeaser(opt.Runner, opt.LeaseMargin); err != nil {
			return nil, err
		}
	}
	return func(ctx context.Context, event In) (out Out, err error) {
		var ev Event
		if opt.OnEvent != nil {
			start := time.Now()
			defer func() {
				if ev.Outcome != "" { // "": the handler panicked
					ev.Start, ev.Duration = start, time.Since(start)
					opt.OnEvent(ev)
				}
			}()
		}
		var zero Out
		raw, err := json.Marshal(event)
		if err != nil {
			ev.Outcome, ev.Err = OutcomeError, err
			return zero, fmt.Errorf("%w: encoding the event: %v", idem.ErrInvalidInput, err)
		}
		doc, err := decode(raw)
		if err != nil {
			ev.Outcome, ev.Err = OutcomeError, err
			return zero, fmt.Errorf("%w: decoding the event: %v", idem.ErrInvalidInput, err)
		}
		vals := make([]any, len(keys))
		for i, k := range keys {
			v, ok := lookup(doc, k)
			if !ok || empty(v) {
				if opt.RequireKey {
					ev.Outcome = OutcomeMissingKey
					return zero, fmt.Errorf("%w at %q", ErrMissingKey, names[i])
				}
				opt.Logger.Warn("idemlambda: no idempotency key in the event; handler runs without protection", "key_path", names[i])
				out, err = handler(ctx, event)
				ev.Outcome, ev.Err = OutcomeBypass, err
				return out, err
			}
			vals[i] = v
		}
		if off {
			out, err = handler(ctx, event)
			ev.Outcome, ev.Err = OutcomeBypass, err
			return out, err
		}
		var enc string
		var input any = vals[0]
		if len(vals) == 1 {
			enc = encodeKey(vals[0])
			if _, ok := vals[0].(string); !ok {
				input = enc // one fingerprint for equal values written apart (5 and 5.0)
			}
		} else {
			enc = encodeTuple(vals)
			input = enc
		}
		if fp != nil {
			input, _ = lookup(doc, fp) // absent: null
		}
		ev.Key = storageKey(opt.Name, enc)
		bctx, b := lease.bind(ctx)
		ran := false
		var herr error
		out, res, err := idem.RunJSON(bctx, lease.eng, idem.Call{Key: ev.Key, Route: opt.Name}, input, func(ctx context.Context) (Out, error) {
			defer b.run()()
			ran = true
			var o Out
			o, herr = handler(ctx, event)
			return o, herr
		})
		ev.Takeover, ev.Err = res.Takeover, err
		switch {
		case ran:
			ev.Outcome = ranOutcome(herr, res.Kept)
			if herr == nil && err != nil {
				ev.Outcome = OutcomeExecuted // the result could not be stored; Err says why
			}
		case err == nil:
			ev.Outcome = OutcomeReplay
		default:
			ev.Outcome = engineOutcome(err)
		}
		return out, b.joinRelease(err)
	}, nil
}

// engineOutcome is the Outcome of an invocation the engine refused before the handler ran.
func engineOutcome(err error) Outcome {
	switch {
	case errors.Is(err, idem.ErrInFlight):
		return OutcomeInFlight
	case errors.Is(err, idem.ErrMismatch):
		return OutcomeMismatch
	case errors.Is(err, idem.ErrStoreUnavailable):
		return OutcomeStoreError
	}
	return OutcomeError
}

func cmpErr(err error, otherwise string) any {
	if err != nil {
		return err
	}
	return otherwise
}

// parsePath splits a path into its segments; "." is the whole event (no segment).
func parsePath(p string) ([]string, error) {
	if p == "." {
		return []string{}, nil
	}
	segs := strings.Split(p, ".")
	for _, s := range segs {
		if s == "" {
			return nil, errors.New("empty segment")
		}
	}
	return segs, nil
}

// decode parses JSON keeping numbers as written.
func decode(b []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	return v, nil
}

// lookup walks path from v. A string met with segments left is decoded as JSON. A null or a
// missing value is not found.
func lookup(v any, path []string) (any, bool) {
	for _, seg := range path {
		if s, ok := v.(string); ok {
			inner, err := decode([]byte(s))
			if err != nil {
				return nil, false
			}
			v = inner
		}
		switch x := v.(type) {
		case map[string]any:
			next, ok := x[seg]
			if !ok {
				return nil, false
			}
			v = next
		case []any:
			i, err := strconv.Atoi(seg)
			if err != nil || i < 0 || i >= len(x) {
				return nil, false
			}
			v = x[i]
		default:
			return nil, false
		}
	}
	return v, v != nil
}

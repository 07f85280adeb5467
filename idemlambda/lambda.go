package idemlambda

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
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

// ErrMissingKey: the event has no value at Options.KeyPath and Options.RequireKey is set. The
// handler did not run.
var ErrMissingKey = errors.New("idemlambda: no idempotency key in the event")

// ErrOptions reports an invalid option; the message names the field.
var ErrOptions = errors.New("idemlambda: invalid options")

// Options configure Wrap. Engine and KeyPath are required.
type Options struct {
	// Engine runs the handler at most once per key and stores its result. Its TTL is how long
	// results are replayed; its Wait lets a duplicate invocation wait for the first one's
	// result instead of failing with idem.ErrInFlight. Required.
	Engine *idem.Engine
	// KeyPath says where the key is in the event: a path into the event's JSON encoding, its
	// segments separated by dots ("detail.order_id", "body.order_id", "Records.0.messageId"),
	// or "." for the whole event. A segment of digits indexes an array. A string that holds
	// JSON (the body of an API Gateway request, of an SQS message) is decoded when the path goes
	// on into it. A string, number or boolean found there is the key as it is; an object or an
	// array is hashed (sha256:…). Choose what identifies the business fact and stays the same
	// on every retry: never a per-delivery field such as an API Gateway request id. Required.
	KeyPath string
	// FingerprintPath says which part of the event must be the same for a second event with
	// the key to count as a duplicate (same syntax; "." for the whole event). An event with the
	// key and another value there fails with idem.ErrMismatch and the handler does not run.
	// Default "": only the key is compared.
	FingerprintPath string
	// Name keeps the keys of different functions apart: the storage key is Name, '|', key.
	// Default: the function's name (the AWS_LAMBDA_FUNCTION_NAME environment variable), or
	// "lambda" where it is not set. It must not contain '|'.
	Name string
	// RequireKey makes an event without a value at KeyPath fail with ErrMissingKey. Default
	// false: the handler runs for it without protection, and a warning is logged.
	RequireKey bool
	// LeaseMargin is how long after the invocation's deadline its claim still holds: a claim's
	// lease is at most the time left before the deadline (ctx.Deadline(), which Lambda sets)
	// plus LeaseMargin, and at most the engine's Options.Lease, so the claim of an invocation
	// that timed out is free for the retry soon after, never before it is stopped. Default
	// DefaultLeaseMargin; negative leaves the engine's lease as it is.
	LeaseMargin time.Duration
	// Logger receives warnings. Default slog.Default().
	Logger *slog.Logger
}

// Wrap returns handler made idempotent, to pass to lambda.Start: an event whose key (found at
// Options.KeyPath) was seen before gets the stored result instead of a second run. It fails
// with an error wrapping ErrOptions, naming the field, if an option is invalid.
//
// The result is stored as JSON and a replay is decoded from it (see idem.DoJSON for what JSON
// keeps); Lambda returns results as JSON anyway, so the caller gets the same bytes. An error
// from the handler releases the key, so a retry runs it again (Lambda retries asynchronous
// invocations on error); a panic releases it too. A duplicate while the first runs gets an
// error matching idem.ErrInFlight unless the engine's Wait covers it, a second event with
// the key but another FingerprintPath value one matching idem.ErrMismatch, and a store that
// cannot be reached one matching idem.ErrStoreUnavailable, without running the handler. These
// are the errors AWS Lambda Powertools raises as IdempotencyAlreadyInProgressError and
// IdempotencyValidationError: match them with errors.Is.
//
// The claim's lease is bounded by the invocation's deadline (see Options.LeaseMargin).
func Wrap[In, Out any](opt Options, handler func(ctx context.Context, event In) (Out, error)) (func(ctx context.Context, event In) (Out, error), error) {
	switch {
	case opt.Engine == nil:
		return nil, fmt.Errorf("%w: Options.Engine is required", ErrOptions)
	case handler == nil:
		return nil, fmt.Errorf("%w: the handler is nil", ErrOptions)
	}
	key, err := parsePath(opt.KeyPath)
	if err != nil || opt.KeyPath == "" {
		return nil, fmt.Errorf("%w: Options.KeyPath %q: %v", ErrOptions, opt.KeyPath, cmpErr(err, "required"))
	}
	var fp []string
	if opt.FingerprintPath != "" {
		if fp, err = parsePath(opt.FingerprintPath); err != nil {
			return nil, fmt.Errorf("%w: Options.FingerprintPath %q: %v", ErrOptions, opt.FingerprintPath, err)
		}
	}
	if opt.Name == "" {
		opt.Name = os.Getenv("AWS_LAMBDA_FUNCTION_NAME")
	}
	if opt.Name == "" {
		opt.Name = "lambda"
	}
	if strings.IndexByte(opt.Name, '|') >= 0 {
		return nil, fmt.Errorf("%w: Options.Name %q contains '|'", ErrOptions, opt.Name)
	}
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	lease, err := newLeaser(opt.Engine, opt.LeaseMargin)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, event In) (Out, error) {
		var zero Out
		raw, err := json.Marshal(event)
		if err != nil {
			return zero, fmt.Errorf("%w: encoding the event: %v", idem.ErrInvalidInput, err)
		}
		doc, err := decode(raw)
		if err != nil {
			return zero, fmt.Errorf("%w: decoding the event: %v", idem.ErrInvalidInput, err)
		}
		kv, ok := lookup(doc, key)
		if !ok {
			if opt.RequireKey {
				return zero, fmt.Errorf("%w at %q", ErrMissingKey, opt.KeyPath)
			}
			opt.Logger.Warn("idemlambda: no idempotency key in the event; handler runs without protection", "key_path", opt.KeyPath)
			return handler(ctx, event)
		}
		k, err := keyOf(kv)
		if err != nil {
			return zero, err
		}
		storageKey := opt.Name + "|" + k
		if idem.CheckKey(storageKey) != nil {
			storageKey = opt.Name + "|" + hashed([]byte(k))
		}
		var input any = kv
		if fp != nil {
			input, _ = lookup(doc, fp) // absent: null
		}
		bctx, b := lease.bind(ctx)
		out, _, err := idem.DoJSON(bctx, lease.eng, storageKey, input, func(ctx context.Context) (Out, error) {
			defer b.run()()
			return handler(ctx, event)
		})
		return out, err
	}, nil
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

// keyOf turns the value found at the key path into a key.
func keyOf(v any) (string, error) {
	switch x := v.(type) {
	case string:
		if x == "" {
			return "", fmt.Errorf("%w: the idempotency key in the event is empty", idem.ErrInvalidInput)
		}
		return x, nil
	case json.Number:
		return x.String(), nil
	case bool:
		return strconv.FormatBool(x), nil
	}
	b, err := json.Marshal(v) // objects and arrays, with map keys sorted
	if err != nil {
		return "", fmt.Errorf("%w: encoding the key: %v", idem.ErrInvalidInput, err)
	}
	return hashed(b), nil
}

func hashed(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

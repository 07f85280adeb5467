package idem

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
)

// ErrResultNotRetained: the effect ran and succeeded, but its result could not be encoded as
// JSON, so the record was completed without it. The effect is not run again for the key; a
// duplicate gets this error instead of a result.
var ErrResultNotRetained = errors.New("idem: result not retained")

// DoJSON runs fn at most once for key and returns its result; a duplicate gets the stored
// result back, decoded from JSON. It is Engine.Do for functions that return a Go value rather
// than a Response: the typed form of an idempotent function.
//
// The fingerprint is the SHA-256 of the JSON encoding of input: pass the request (or the part
// of it that must match for a duplicate to be a duplicate), never something that changes
// between retries, such as a timestamp. A retry of key with an input whose JSON differs gets
// an error matching ErrMismatch and fn does not run. An input that cannot be encoded returns
// an error matching ErrInvalidInput, and fn does not run.
//
// The result is stored as its JSON encoding (Result.Response.Body, with Status 0). The first
// caller gets the value fn returned; every duplicate gets a new T decoded from the stored JSON.
// The two are equal only as far as JSON carries them: unexported fields, fields tagged
// `json:"-"`, the monotonic clock reading and the Location of a time.Time, and the dynamic
// type of a value held in an interface (it comes back as map[string]any, []any, float64,
// string or bool, so an integer above 2^53 in an interface loses precision) are lost. Give T a
// JSON shape that round-trips if duplicates must see what the first caller saw.
//
// Errors follow the engine's Policy, as for Do: with the default policy an error from fn
// releases the claim so a retry runs fn again, an error wrapping ErrUncertain holds it, and a
// panic releases it and is re-panicked. A result that cannot be encoded as JSON (a channel, a
// function, a float NaN) is not stored: the record is completed without it so fn never runs
// again for the key, the first caller gets the value together with an error matching
// ErrResultNotRetained, and each duplicate gets the zero T and that error. A stored result that
// no longer decodes into T (T changed between releases) returns the zero T and an error
// matching ErrCorruptRecord.
//
// Every other outcome (ErrInFlight, ErrStoreUnavailable, ErrLeaseLost after fn ran) is
// Engine.Do's, with the zero T unless fn ran in this call.
//
// DoJSON is RunJSON's short form, for a call that keeps no route and no request with the
// record: RunJSON(ctx, r, Call{Key: key}, input, fn).
func DoJSON[T any](ctx context.Context, r Runner, key string, input any, fn func(ctx context.Context) (T, error)) (T, Result, error) {
	return RunJSON(ctx, r, Call{Key: key}, input, fn)
}

// RunJSON is DoJSON with the Call a caller builds: its Key, Route and Request are the record's,
// as for Runner.Run, and its Fingerprint is the SHA-256 of the JSON encoding of input. A Call
// that names a Fingerprint of its own is refused with an error matching ErrInvalidInput, and
// fn does not run.
func RunJSON[T any](ctx context.Context, r Runner, call Call, input any, fn func(ctx context.Context) (T, error)) (T, Result, error) {
	var zero T
	key := call.Key
	switch {
	case fn == nil:
		return zero, Result{}, invalid("nil function")
	case call.Fingerprint != "":
		return zero, Result{}, invalid("Call.Fingerprint is set: RunJSON derives it from the input")
	}
	in, err := json.Marshal(input)
	if err != nil {
		return zero, Result{}, fmt.Errorf("%w: encoding the input: %v", ErrInvalidInput, err)
	}
	call.Fingerprint = Fingerprint(in)
	var out T
	var encErr error
	res, err := r.Run(ctx, call, func(ctx context.Context) (Response, error) {
		v, err := fn(ctx)
		out = v
		if err != nil {
			return Response{}, err
		}
		body, err := json.Marshal(v)
		if err != nil {
			encErr = err
			return Response{BodyOmitted: true}, nil
		}
		return Response{Body: body}, nil
	})
	if res.Executed {
		if err == nil && encErr != nil {
			err = fmt.Errorf("%w: encoding the result: %v", ErrResultNotRetained, encErr)
		}
		return out, res, err
	}
	if err != nil {
		return zero, res, err
	}
	if res.Response.BodyOmitted {
		return zero, res, fmt.Errorf("%w (key %.80q)", ErrResultNotRetained, key)
	}
	if err := json.Unmarshal(res.Response.Body, &out); err != nil {
		return zero, res, fmt.Errorf("%w: decoding the stored result of key %.80q: %v", ErrCorruptRecord, key, err)
	}
	return out, res, nil
}

// Wrap returns fn made idempotent: called with an input whose key (keyOf(in)) it has seen
// before, it returns the stored result instead of running fn again. It is the typed form of an
// idempotent function, for effects that are a Go function rather than an HTTP handler:
//
//	charge := idem.Wrap(eng, "charge", func(o Order) string { return o.ID }, chargeOrder)
//	receipt, err := charge(ctx, order) // chargeOrder runs at most once per order ID
//
// The storage key is ScopedKey(name, keyOf(in)): name is the scope that keeps the keys of
// different functions apart, and must be a non-empty valid scope (CheckScope: no
// ScopeSeparator, no control character, at most MaxScopeLen bytes). The fingerprint is the JSON encoding of name and in, so
// the same key with another input fails with ErrMismatch. The records carry name as their
// route (Record.Route), for operators. Everything else — replay decoded from
// JSON, errors released for retry, panics, results that cannot be encoded — is DoJSON's; read
// its documentation for what a replayed Out keeps. Use DoJSON directly to fingerprint only a
// part of the input or to see the Result (was it replayed?).
//
// An empty key, or an invalid name, makes the call fail with an error matching
// ErrInvalidInput; fn does not run.
func Wrap[In, Out any](e Runner, name string, keyOf func(In) string, fn func(ctx context.Context, in In) (Out, error)) func(ctx context.Context, in In) (Out, error) {
	return func(ctx context.Context, in In) (Out, error) {
		var zero Out
		switch {
		case name == "":
			return zero, invalid("empty function name")
		case !ValidScope(name):
			return zero, fmt.Errorf("function name: %w", CheckScope(name))
		case keyOf == nil || fn == nil:
			return zero, invalid("nil key or function")
		}
		k := keyOf(in)
		if k == "" {
			return zero, invalid("empty key for function %.80q", name)
		}
		out, _, err := RunJSON(ctx, e, Call{Key: ScopedKey(name, k), Route: name}, wrapped[In]{Name: name, In: in}, func(ctx context.Context) (Out, error) {
			return fn(ctx, in)
		})
		return out, err
	}
}

// wrapped is what Wrap fingerprints: the function's name and its input.
type wrapped[In any] struct {
	Name string
	In   In
}

package idem

import (
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// Sentinel errors. Every error the engine returns for these cases matches them with errors.Is.
var (
	// ErrInFlight: another holder is running the effect for this key now. Retry later; an
	// *InFlightError carries how long.
	ErrInFlight = errors.New("idem: an operation with this key is in flight")
	// ErrMismatch: the key was used before with a different request fingerprint.
	ErrMismatch = errors.New("idem: key reused with a different request")
	// ErrLeaseLost: the claim was taken over or released; the holder must not complete it.
	ErrLeaseLost = errors.New("idem: lease lost")
	// ErrStoreUnavailable: the store could not be reached or failed; no effect ran.
	ErrStoreUnavailable = errors.New("idem: store unavailable")
	// ErrNotFound: the store has no record for the key.
	ErrNotFound = errors.New("idem: record not found")
	// ErrUncertain marks an effect that may or may not have happened (a timeout after the
	// request was sent). Wrap it with Uncertain; the engine then neither stores nor releases.
	ErrUncertain = errors.New("idem: outcome uncertain")
	// ErrInvalidInput: a key, fingerprint, option or argument is malformed. No record was
	// touched. The error text names what is wrong.
	ErrInvalidInput = errors.New("idem: invalid input")
	// ErrClosed: the store was closed. Every store returns an error matching it from each call
	// made after Close. It also matches ErrStoreUnavailable, so the engine fails closed.
	ErrClosed error = closedError{}
)

type closedError struct{}

func (closedError) Error() string        { return "idem: store is closed" }
func (closedError) Is(target error) bool { return target == ErrStoreUnavailable }

// StoreError wraps an error from the store. It matches ErrStoreUnavailable with errors.Is and
// unwraps to the store's own error.
type StoreError struct {
	// Op is the store step that failed: "reserve", "complete", "release", "extend", "get", or
	// a backend's own step (pgstore.DoTx reports "begin" and "commit").
	Op string
	// Err is the store's error.
	Err error
}

// Error implements error.
func (e *StoreError) Error() string { return "idem: store " + e.Op + ": " + e.Err.Error() }

// Unwrap returns the store's error.
func (e *StoreError) Unwrap() error { return e.Err }

// Is makes a StoreError match ErrStoreUnavailable.
func (e *StoreError) Is(target error) bool { return target == ErrStoreUnavailable }

// storeError wraps a store's error for op as a *StoreError, unless the store returned one
// already (its message would otherwise say "idem: store" twice).
func storeError(op string, err error) error {
	if se := (*StoreError)(nil); errors.As(err, &se) {
		return err
	}
	return &StoreError{Op: op, Err: err}
}

// InFlightError is returned when another holder is running the effect. It matches ErrInFlight.
type InFlightError struct {
	// Key is the scoped key.
	Key string
	// RetryAfter estimates when the answer will exist, so that a caller who waits that long
	// gets it soon after it does. Engine.Do sets it to as long as the effect has run so far (an effect that has run
	// for d is likely to need about d more, so waiting in steps of the time already spent
	// costs at most about the effect's own duration again), but never more than one heartbeat
	// interval (Options.Heartbeat) nor than the holder's lease left, and at least one second.
	// It is rounded up to whole seconds, the resolution of HTTP's Retry-After.
	RetryAfter time.Duration
}

// Error implements error.
func (e *InFlightError) Error() string {
	return fmt.Sprintf("idem: an operation with this key is in flight (retry after %s)", e.RetryAfter)
}

// Is makes an InFlightError match ErrInFlight.
func (e *InFlightError) Is(target error) bool { return target == ErrInFlight }

// uncertainError marks an error as uncertain while keeping it in the chain.
type uncertainError struct{ err error }

func (e *uncertainError) Error() string {
	if e.err == nil {
		return ErrUncertain.Error()
	}
	return "idem: outcome uncertain: " + e.err.Error()
}
func (e *uncertainError) Unwrap() []error {
	if e.err == nil {
		return []error{ErrUncertain}
	}
	return []error{ErrUncertain, e.err}
}

// Uncertain marks err as an uncertain outcome: the effect may have happened. Return it from
// the function given to Engine.Do and the engine keeps the claim instead of releasing it
// (see UncertainPolicy), so a retry is never a silent second execution.
func Uncertain(err error) error { return &uncertainError{err: err} }

// CheckKey reports whether key is a valid storage key: 1 to MaxStorageKeyLen bytes of UTF-8 without a
// NUL byte. The error matches ErrInvalidInput and says what is wrong. The engine checks every
// key with it, and so do the stores, so a key one accepts is a key all accept.
func CheckKey(key string) error {
	switch {
	case key == "":
		return invalid("empty key")
	case len(key) > MaxStorageKeyLen:
		return invalid("key of %d bytes is longer than %d", len(key), MaxStorageKeyLen)
	case !utf8.ValidString(key):
		return invalid("key is not valid UTF-8")
	case strings.IndexByte(key, 0) >= 0:
		return invalid("key contains a NUL byte")
	}
	return nil
}

// OptionError reports an invalid option or argument given to a constructor (idem.New,
// idemhttp.New, consumer.New, …). It matches ErrInvalidInput with errors.Is, and its text has
// one shape everywhere: "<package>: invalid options: <field> <problem>", the package being the
// one that raised it, so a caller can tell which constructor refused and why.
type OptionError struct {
	// Package is the package that raised the error: "idem", "idemhttp", "consumer", ….
	Package string
	// Field names the option or argument at fault, as a user writes it: "Options.Lease",
	// "handler", or a configuration key such as "upstream".
	Field string
	// Problem says what is wrong with it, read after the field: "is required",
	// "-1s is negative".
	Problem string
}

// Error implements error.
func (e *OptionError) Error() string {
	return e.Package + ": invalid options: " + e.Field + " " + e.Problem
}

// Is makes an OptionError match ErrInvalidInput.
func (e *OptionError) Is(target error) bool { return target == ErrInvalidInput }

// optionError returns an *OptionError raised by this package.
func optionError(field, format string, args ...any) error {
	return &OptionError{Package: "idem", Field: field, Problem: fmt.Sprintf(format, args...)}
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidInput}, args...)...)
}

package idem

import (
	"errors"
	"fmt"
	"time"
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
)

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

// InFlightError is returned when another holder is running the effect. It matches ErrInFlight.
type InFlightError struct {
	// Key is the scoped key.
	Key string
	// RetryAfter is how long until the holder's lease runs out (at least one second).
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

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidInput}, args...)...)
}

// Package storeerr holds the checks and errors the stores share around their calls to the
// database: the store open and the context live, arguments not negative, invalid input named
// by the store's package, and the wrapping of the SQL stores' database errors. Each store
// passes its package name, which its errors start with.
package storeerr

import (
	"context"
	"errors"
	"fmt"

	"github.com/idemkit/idem"
)

// Ready is a store's first check of a call: idem.ErrClosed once the store is closed, else
// ctx's error.
func Ready(ctx context.Context, closed bool) error {
	if closed {
		return idem.ErrClosed
	}
	return ctx.Err()
}

// Invalid returns an error wrapping idem.ErrInvalidInput, "pkg: invalid input: " and the
// formatted message.
func Invalid(pkg, format string, args ...any) error {
	return fmt.Errorf(pkg+": %w: "+format, append([]any{idem.ErrInvalidInput}, args...)...)
}

// Op wraps err, the failure of the SQL store pkg's operation op, as "pkg: op: err". nil and
// the errors that speak for themselves (idem.ErrInvalidInput, idem.ErrLeaseLost,
// idem.ErrNotFound, idem.ErrClosed) are returned as they are.
func Op(pkg, op string, err error) error {
	if err == nil || errors.Is(err, idem.ErrInvalidInput) || errors.Is(err, idem.ErrLeaseLost) || errors.Is(err, idem.ErrNotFound) || err == idem.ErrClosed {
		return err
	}
	return fmt.Errorf("%s: %s: %w", pkg, op, err)
}

// SweepBatch checks a Sweep: ready's error, an error wrapping idem.ErrInvalidInput for a
// negative batch, or false with no error for a batch of 0, which deletes nothing.
func SweepBatch(ctx context.Context, ready func(context.Context) error, pkg string, batch int) (bool, error) {
	if err := ready(ctx); err != nil {
		return false, err
	}
	if batch < 0 {
		return false, Invalid(pkg, "sweep batch %d is negative", batch)
	}
	return batch > 0, nil
}

// CountLimit checks a CountExpired: ready's error, or an error wrapping idem.ErrInvalidInput
// for a negative limit.
func CountLimit(ctx context.Context, ready func(context.Context) error, pkg string, limit int) error {
	if err := ready(ctx); err != nil {
		return err
	}
	if limit < 0 {
		return Invalid(pkg, "count limit %d is negative", limit)
	}
	return nil
}

// Option returns an *idem.OptionError raised by the store package pkg: field names the option
// or argument at fault ("Options.Table", "db"), the formatted problem says what is wrong with
// it. It matches idem.ErrInvalidInput.
func Option(pkg, field, format string, args ...any) error {
	return &idem.OptionError{Package: pkg, Field: field, Problem: fmt.Sprintf(format, args...)}
}

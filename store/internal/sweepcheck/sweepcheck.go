// Package sweepcheck checks the calls of the SQL stores' Sweep and CountExpired before they
// touch the database: the store open, the context live, the batch or limit not negative.
// Each store passes its ready check and its package name, which its errors start with.
package sweepcheck

import (
	"context"
	"fmt"

	"github.com/idemkit/idem"
)

// Batch checks a Sweep: ready's error, an error wrapping idem.ErrInvalidInput for a negative
// batch, or false with no error for a batch of 0, which deletes nothing.
func Batch(ctx context.Context, ready func(context.Context) error, pkg string, batch int) (bool, error) {
	if err := ready(ctx); err != nil {
		return false, err
	}
	if batch < 0 {
		return false, fmt.Errorf("%s: %w: sweep batch %d is negative", pkg, idem.ErrInvalidInput, batch)
	}
	return batch > 0, nil
}

// Limit checks a CountExpired: ready's error, or an error wrapping idem.ErrInvalidInput for a
// negative limit.
func Limit(ctx context.Context, ready func(context.Context) error, pkg string, limit int) error {
	if err := ready(ctx); err != nil {
		return err
	}
	if limit < 0 {
		return fmt.Errorf("%s: %w: count limit %d is negative", pkg, idem.ErrInvalidInput, limit)
	}
	return nil
}

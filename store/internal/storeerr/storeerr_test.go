package storeerr

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/idemkit/idem"
)

func TestReady(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	if err := Ready(ctx, false); err != nil {
		t.Errorf("open store, live context: %v", err)
	}
	if err := Ready(ctx, true); !errors.Is(err, idem.ErrClosed) {
		t.Errorf("closed store: %v, want idem.ErrClosed", err)
	}
	cancel()
	if err := Ready(ctx, false); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled context: %v, want context.Canceled", err)
	}
	if err := Ready(ctx, true); !errors.Is(err, idem.ErrClosed) {
		t.Errorf("closed store, cancelled context: %v, want idem.ErrClosed first", err)
	}
}

func TestInvalid(t *testing.T) {
	err := Invalid("pgstore", "batch %d is negative", -1)
	if !errors.Is(err, idem.ErrInvalidInput) || !strings.HasPrefix(err.Error(), "pgstore: ") || !strings.HasSuffix(err.Error(), "batch -1 is negative") {
		t.Errorf("Invalid = %q, want it to wrap idem.ErrInvalidInput, start with the package and end with the message", err)
	}
}

func TestOp(t *testing.T) {
	if Op("pgstore", "reserve", nil) != nil {
		t.Error("Op of nil is not nil")
	}
	// Errors that speak for themselves come back as they are.
	for _, e := range []error{idem.ErrClosed, fmt.Errorf("x: %w", idem.ErrInvalidInput), idem.ErrLeaseLost, idem.ErrNotFound} {
		if got := Op("pgstore", "reserve", e); got != e {
			t.Errorf("Op(%v) = %v, want it unchanged", e, got)
		}
	}
	db := errors.New("connection reset")
	got := Op("mysqlstore", "complete", db)
	if !errors.Is(got, db) || got.Error() != "mysqlstore: complete: connection reset" {
		t.Errorf("Op = %q, want \"mysqlstore: complete: connection reset\" wrapping the driver's error", got)
	}
}

func TestSweepBatchAndCountLimit(t *testing.T) {
	ctx := context.Background()
	ready := func(context.Context) error { return nil }
	if run, err := SweepBatch(ctx, ready, "s", 0); run || err != nil {
		t.Errorf("batch 0: %v %v, want nothing to do and no error", run, err)
	}
	if run, err := SweepBatch(ctx, ready, "s", 10); !run || err != nil {
		t.Errorf("batch 10: %v %v, want a sweep", run, err)
	}
	if _, err := SweepBatch(ctx, ready, "s", -1); !errors.Is(err, idem.ErrInvalidInput) {
		t.Errorf("batch -1: %v, want idem.ErrInvalidInput", err)
	}
	closed := func(context.Context) error { return idem.ErrClosed }
	if _, err := SweepBatch(ctx, closed, "s", -1); !errors.Is(err, idem.ErrClosed) {
		t.Errorf("closed store: %v, want idem.ErrClosed before the batch is checked", err)
	}
	if err := CountLimit(ctx, ready, "s", -1); !errors.Is(err, idem.ErrInvalidInput) {
		t.Errorf("limit -1: %v, want idem.ErrInvalidInput", err)
	}
	if err := CountLimit(ctx, closed, "s", 5); !errors.Is(err, idem.ErrClosed) {
		t.Errorf("closed store: %v, want idem.ErrClosed", err)
	}
	if err := CountLimit(ctx, ready, "s", 0); err != nil {
		t.Errorf("limit 0: %v", err)
	}
}

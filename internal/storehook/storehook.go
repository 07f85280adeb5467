// Package storehook wraps an idem.Store so that functions see each call on its way in and
// out: the gateway times store operations with it, and tests count round trips or make the
// store fail. The wrapper adds no behaviour of its own.
package storehook

import (
	"context"
	"time"

	"github.com/idemkit/idem"
)

// Op is a store operation.
type Op uint8

// The operations of idem.Store.
const (
	Reserve Op = iota
	Complete
	Release
	Extend
	Get
	Sweep
	// NumOps is the number of operations, for arrays indexed by Op.
	NumOps
)

var names = [NumOps]string{"reserve", "complete", "release", "extend", "get", "sweep"}

// String returns the operation's name in lower case ("reserve").
func (o Op) String() string {
	if o < NumOps {
		return names[o]
	}
	return "unknown"
}

// Hooks are the functions a wrapped store calls. Either may be nil.
type Hooks struct {
	// Before runs before the call; an error it returns is the call's error, and the wrapped
	// store is not called.
	Before func(ctx context.Context, op Op) error
	// After runs after the call (also after a failing Before) with the time it began and
	// its error.
	After func(op Op, start time.Time, err error)
}

// Wrap returns st with h around each of its calls.
func Wrap(st idem.Store, h Hooks) idem.Store { return &store{st: st, h: h} }

type store struct {
	st idem.Store
	h  Hooks
}

func (s *store) before(ctx context.Context, op Op) (time.Time, error) {
	var start time.Time
	if s.h.After != nil {
		start = time.Now()
	}
	if s.h.Before != nil {
		return start, s.h.Before(ctx, op)
	}
	return start, nil
}

func (s *store) after(op Op, start time.Time, err error) {
	if s.h.After != nil {
		s.h.After(op, start, err)
	}
}

func (s *store) Reserve(ctx context.Context, req idem.ReserveRequest) (r idem.Reservation, err error) {
	start, err := s.before(ctx, Reserve)
	if err == nil {
		r, err = s.st.Reserve(ctx, req)
	}
	s.after(Reserve, start, err)
	return r, err
}

func (s *store) Complete(ctx context.Context, key string, token int64, resp idem.Response, now, exp time.Time) error {
	start, err := s.before(ctx, Complete)
	if err == nil {
		err = s.st.Complete(ctx, key, token, resp, now, exp)
	}
	s.after(Complete, start, err)
	return err
}

func (s *store) Release(ctx context.Context, key string, token int64) error {
	start, err := s.before(ctx, Release)
	if err == nil {
		err = s.st.Release(ctx, key, token)
	}
	s.after(Release, start, err)
	return err
}

func (s *store) Extend(ctx context.Context, key string, token int64, until time.Time) error {
	start, err := s.before(ctx, Extend)
	if err == nil {
		err = s.st.Extend(ctx, key, token, until)
	}
	s.after(Extend, start, err)
	return err
}

func (s *store) Get(ctx context.Context, key string) (r idem.Record, err error) {
	start, err := s.before(ctx, Get)
	if err == nil {
		r, err = s.st.Get(ctx, key)
	}
	s.after(Get, start, err)
	return r, err
}

func (s *store) Sweep(ctx context.Context, now time.Time, batch int) (n int, err error) {
	start, err := s.before(ctx, Sweep)
	if err == nil {
		n, err = s.st.Sweep(ctx, now, batch)
	}
	s.after(Sweep, start, err)
	return n, err
}

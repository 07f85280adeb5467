// Package memstore is an in-memory idem.Store for tests and single-process use.
//
// Records live in one map guarded by a mutex; nothing survives the process. Use sqlitestore
// for an embedded store that does.
package memstore

import (
	"context"
	"sync"
	"time"

	"github.com/idemkit/idem"
)

var (
	_ idem.Store   = (*Store)(nil)
	_ idem.Deleter = (*Store)(nil)
)

// Store is an in-memory idem.Store. The zero value is not usable; call New.
type Store struct {
	mu     sync.Mutex
	recs   map[string]*entry
	closed bool
}

// entry is a record with its response kept encoded (idem.EncodeResponse): one allocation and
// no pointers for the garbage collector to follow, however many headers the response has.
type entry struct {
	idem.Record // Response is always nil here
	resp        []byte
}

// New returns an empty Store.
func New() *Store { return &Store{recs: make(map[string]*entry)} }

// Close makes every later call fail with idem.ErrStoreUnavailable. It is safe to call twice.
func (s *Store) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	return nil
}

// Len returns how many records the store holds, expired ones included.
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.recs)
}

func (s *Store) lock(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return errClosed
	}
	return nil
}

// released marks a released record: expired since the epoch, its token dead.
var released = time.Unix(0, 0)

var errClosed = &closedError{}

type closedError struct{}

func (*closedError) Error() string        { return "memstore: closed" }
func (*closedError) Is(target error) bool { return target == idem.ErrStoreUnavailable }

// Reserve implements idem.Store.
func (s *Store) Reserve(ctx context.Context, key, fingerprint string, now time.Time, lease, window time.Duration) (idem.Reservation, error) {
	if err := s.lock(ctx); err != nil {
		return idem.Reservation{}, err
	}
	defer s.mu.Unlock()
	now = now.Truncate(time.Microsecond)
	old, exists := s.recs[key]
	takeover := false
	var prev int64
	attempts := 1
	if exists {
		switch {
		case old.Expired(now):
			prev = old.Token
		case old.LeaseExpired(now) && old.Fingerprint == fingerprint:
			prev, takeover, attempts = old.Token, true, old.Attempts+1
		default:
			return idem.Reservation{Record: clone(old)}, nil
		}
	}
	rec := &entry{Record: idem.Record{
		Key:         key,
		Fingerprint: fingerprint,
		State:       idem.StateInProgress,
		Token:       idem.NextToken(prev, now),
		LeaseUntil:  now.Add(lease).Truncate(time.Microsecond),
		Attempts:    attempts,
		CreatedAt:   now,
		ExpiresAt:   now.Add(window).Truncate(time.Microsecond),
	}}
	if takeover {
		rec.CreatedAt = old.CreatedAt
	}
	s.recs[key] = rec
	return idem.Reservation{Claimed: true, Takeover: takeover, Record: clone(rec)}, nil
}

// held returns the record for key if it is in progress with token.
func (s *Store) held(key string, token int64) (*entry, error) {
	rec, ok := s.recs[key]
	if !ok || rec.State != idem.StateInProgress || rec.Token != token || rec.ExpiresAt.Equal(released) {
		return nil, idem.ErrLeaseLost
	}
	return rec, nil
}

// Complete implements idem.Store.
func (s *Store) Complete(ctx context.Context, key string, token int64, resp idem.Response, now, expiresAt time.Time) error {
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	rec, err := s.held(key, token)
	if err != nil {
		return err
	}
	rec.State = idem.StateCompleted
	rec.resp = idem.EncodeResponse(resp)
	rec.CompletedAt = now.Truncate(time.Microsecond)
	rec.ExpiresAt = expiresAt.Truncate(time.Microsecond)
	return nil
}

// Release implements idem.Store.
func (s *Store) Release(ctx context.Context, key string, token int64) error {
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	rec, err := s.held(key, token)
	if err != nil {
		return err
	}
	// Keep the record, expired, so the next claim's token is larger than this one.
	rec.ExpiresAt = released
	rec.LeaseUntil = released
	return nil
}

// Extend implements idem.Store.
func (s *Store) Extend(ctx context.Context, key string, token int64, until time.Time) error {
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	rec, err := s.held(key, token)
	if err != nil {
		return err
	}
	until = until.Truncate(time.Microsecond)
	rec.LeaseUntil = until
	if until.After(rec.ExpiresAt) {
		rec.ExpiresAt = until
	}
	return nil
}

// Get implements idem.Store.
func (s *Store) Get(ctx context.Context, key string) (idem.Record, error) {
	if err := s.lock(ctx); err != nil {
		return idem.Record{}, err
	}
	defer s.mu.Unlock()
	rec, ok := s.recs[key]
	if !ok {
		return idem.Record{}, idem.ErrNotFound
	}
	return clone(rec), nil
}

// Delete removes key's record whatever its state (idem.Deleter).
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	delete(s.recs, key)
	return nil
}

// Sweep implements idem.Store.
func (s *Store) Sweep(ctx context.Context, now time.Time, batch int) (int, error) {
	if err := s.lock(ctx); err != nil {
		return 0, err
	}
	defer s.mu.Unlock()
	n := 0
	for k, rec := range s.recs {
		if n >= batch {
			break
		}
		if rec.Expired(now) {
			delete(s.recs, k)
			n++
		}
	}
	return n, nil
}

// clone returns the record with its own copy of the response: callers may keep or change it.
func clone(e *entry) idem.Record {
	c := e.Record
	if e.resp != nil {
		// The bytes were written by EncodeResponse, so they always decode.
		r, _ := idem.DecodeResponse(e.resp)
		c.Response = &r
	}
	return c
}

// Package memstore is an in-memory idem.Store for tests and single-process use.
//
// Records live in one map guarded by a mutex; nothing survives the process. Use sqlitestore
// for an embedded store that does.
package memstore

import (
	"context"
	"strings"
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

// entry is a record kept compact: times as Unix microseconds, the fingerprint and the encoded
// response (idem.EncodeResponse) in one string. The map holds a pointer to it, so the map's
// slots stay small (a string and a pointer: growing the map copies little, and more slots
// share a cache line), and the calls after Reserve change the entry in place instead of
// writing the map again. A completed record is three objects (key, entry, blob) and the
// garbage collector follows one pointer in the entry, however many headers the response has.
type entry struct {
	blob     string // the fingerprint, then the encoded response once completed
	fpLen    int32
	token    int64
	lease    int64 // Unix µs; 0 once released
	expires  int64 // Unix µs; 0 once released
	created  int64 // Unix µs
	done     int64 // completed_at, Unix µs; 0 while in progress
	attempts int32
	state    idem.State
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

var errClosed = &closedError{}

type closedError struct{}

func (*closedError) Error() string        { return "memstore: closed" }
func (*closedError) Is(target error) bool { return target == idem.ErrStoreUnavailable }

// micros returns t as Unix microseconds (t is truncated to the microsecond).
func micros(t time.Time) int64 { return t.UnixMicro() }

// fp returns the record's fingerprint.
func (e *entry) fp() string { return e.blob[:e.fpLen] }

func (e *entry) expired(now int64) bool { return e.expires <= now }
func (e *entry) leaseExpired(now int64) bool {
	return e.state == idem.StateInProgress && e.lease <= now
}

// Reserve implements idem.Store.
func (s *Store) Reserve(ctx context.Context, key, fingerprint string, now time.Time, lease, window time.Duration) (idem.Reservation, error) {
	if err := s.lock(ctx); err != nil {
		return idem.Reservation{}, err
	}
	defer s.mu.Unlock()
	n := micros(now)
	e := s.recs[key]
	takeover := false
	var prev int64
	attempts := int32(1)
	created := n
	if e != nil {
		switch {
		case e.expired(n):
			prev = e.token
		case e.leaseExpired(n) && e.fp() == fingerprint:
			prev, takeover, attempts, created = e.token, true, e.attempts+1, e.created
		default:
			return idem.Reservation{Record: record(key, e)}, nil
		}
	} else {
		e = new(entry)
		s.recs[key] = e
	}
	*e = entry{
		blob:     fingerprint,
		fpLen:    int32(len(fingerprint)),
		state:    idem.StateInProgress,
		token:    idem.NextToken(prev, now),
		lease:    micros(now.Add(lease)),
		expires:  micros(now.Add(window)),
		attempts: attempts,
		created:  created,
	}
	return idem.Reservation{Claimed: true, Takeover: takeover, Record: record(key, e)}, nil
}

// held returns the record for key if it is in progress with token.
func (s *Store) held(key string, token int64) (*entry, error) {
	e := s.recs[key]
	if e == nil || e.state != idem.StateInProgress || e.token != token || e.expires == 0 {
		return nil, idem.ErrLeaseLost
	}
	return e, nil
}

// Complete implements idem.Store.
func (s *Store) Complete(ctx context.Context, key string, token int64, resp idem.Response, now, expiresAt time.Time) error {
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	e, err := s.held(key, token)
	if err != nil {
		return err
	}
	e.state = idem.StateCompleted
	enc := idem.EncodeResponse(resp)
	var sb strings.Builder // one allocation for both, and String makes no copy
	sb.Grow(len(e.fp()) + len(enc))
	sb.WriteString(e.fp())
	sb.Write(enc)
	e.blob = sb.String()
	e.done = micros(now)
	e.expires = micros(expiresAt)
	return nil
}

// Release implements idem.Store.
func (s *Store) Release(ctx context.Context, key string, token int64) error {
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	e, err := s.held(key, token)
	if err != nil {
		return err
	}
	// Keep the record, expired, so the next claim's token is larger than this one.
	e.expires, e.lease = 0, 0
	return nil
}

// Extend implements idem.Store.
func (s *Store) Extend(ctx context.Context, key string, token int64, until time.Time) error {
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	e, err := s.held(key, token)
	if err != nil {
		return err
	}
	e.lease = micros(until)
	e.expires = max(e.expires, e.lease)
	return nil
}

// Get implements idem.Store.
func (s *Store) Get(ctx context.Context, key string) (idem.Record, error) {
	if err := s.lock(ctx); err != nil {
		return idem.Record{}, err
	}
	defer s.mu.Unlock()
	e := s.recs[key]
	if e == nil {
		return idem.Record{}, idem.ErrNotFound
	}
	return record(key, e), nil
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
	n, at := 0, micros(now)
	for k, e := range s.recs {
		if n >= batch {
			break
		}
		if e.expired(at) {
			delete(s.recs, k)
			n++
		}
	}
	return n, nil
}

// record returns e as an idem.Record, with its own copy of the response: callers may keep or
// change it.
func record(key string, e *entry) idem.Record {
	r := idem.Record{
		Key:         key,
		Fingerprint: e.fp(),
		State:       e.state,
		Token:       e.token,
		LeaseUntil:  time.UnixMicro(e.lease),
		Attempts:    int(e.attempts),
		CreatedAt:   time.UnixMicro(e.created),
		ExpiresAt:   time.UnixMicro(e.expires),
	}
	if e.done != 0 {
		r.CompletedAt = time.UnixMicro(e.done)
	}
	if len(e.blob) > int(e.fpLen) {
		// The bytes were written by EncodeResponse, so they always decode.
		resp, _ := idem.DecodeResponse([]byte(e.blob[e.fpLen:]))
		r.Response = &resp
	}
	return r
}

package redisstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem"
)

var (
	_ idem.Store   = (*Store)(nil)
	_ idem.Deleter = (*Store)(nil)
)

// Shards is how many hash-tag groups the records of one Prefix are spread over. A record's
// group is FNV-1a(key) mod Shards; each group is one Redis Cluster slot and has its own expiry
// index. It is part of the key layout, hence a constant.
const Shards = 1024

// MaxKeyBytes is the longest key the store accepts.
const MaxKeyBytes = 4096

// Options configure a Store. Only Client is required.
type Options struct {
	// Client is the Redis client: a *redis.Client (standalone, or through Sentinel with
	// redis.NewFailoverClient) or a *redis.ClusterClient. Required. The caller owns it: Close
	// does not close it.
	Client redis.UniversalClient
	// Prefix starts every Redis key the store writes, so one Redis can hold several stores
	// and other data, and ACLs can grant ~prefix*. It must not contain '{' or '}' (the store
	// adds its own hash tag after it). Default "idem:".
	Prefix string
	// TTLMargin is how long past expires_at Redis keeps a record before deleting it by itself
	// (its storage TTL; for cost only, since expires_at decides). The TTL is set relative to
	// the call's now, so clock skew between idem and Redis does not shorten it; the margin
	// covers clock drift and keeps a released record's token around for a while. Default 5m.
	TTLMargin time.Duration
}

// Store is an idem.Store on Redis, standalone or Cluster. It is safe for concurrent use by
// many goroutines and processes. Create it with New.
type Store struct {
	rdb    redis.UniversalClient
	opt    Options
	closed atomic.Bool

	sweepMu   sync.Mutex
	sweepNext int // the shard the next Sweep starts at
}

// New returns a Store. It fails with an error wrapping idem.ErrInvalidInput, naming the field,
// when an option is invalid. It makes no call to Redis.
func New(opt Options) (*Store, error) {
	opt.Prefix = cmp.Or(opt.Prefix, "idem:")
	opt.TTLMargin = cmp.Or(opt.TTLMargin, 5*time.Minute)
	switch {
	case opt.Client == nil:
		return nil, invalid("Options.Client is nil")
	case strings.ContainsAny(opt.Prefix, "{}"):
		return nil, invalid("Options.Prefix %q contains '{' or '}'", opt.Prefix)
	case len(opt.Prefix) > 256:
		return nil, invalid("Options.Prefix of %d bytes is longer than 256", len(opt.Prefix))
	case opt.TTLMargin < 0:
		return nil, invalid("Options.TTLMargin %s is negative", opt.TTLMargin)
	}
	return &Store{rdb: opt.Client, opt: opt}, nil
}

// Options returns the store's options with defaults filled in.
func (s *Store) Options() Options { return s.opt }

// Close makes every later call fail with an error matching idem.ErrStoreUnavailable. It does
// not close the client, which the caller owns. It is safe to call more than once.
func (s *Store) Close() error {
	s.closed.Store(true)
	return nil
}

// Error is a failure of a Redis call (network, server error, an unreadable record). It
// matches idem.ErrStoreUnavailable with errors.Is and unwraps to the client's error.
type Error struct {
	// Op is the store operation: "reserve", "complete", "release", "extend", "get", "delete",
	// "sweep".
	Op string
	// Err is go-redis's error, or a description of an unexpected answer.
	Err error
}

// Error implements error.
func (e *Error) Error() string { return "redisstore: " + e.Op + ": " + e.Err.Error() }

// Unwrap returns the underlying error.
func (e *Error) Unwrap() error { return e.Err }

// Is makes an Error match idem.ErrStoreUnavailable.
func (e *Error) Is(target error) bool { return target == idem.ErrStoreUnavailable }

var errClosed = errors.New("store is closed")

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: redisstore: "+format, append([]any{idem.ErrInvalidInput}, args...)...)
}

// begin checks what every keyed operation checks first.
func (s *Store) begin(ctx context.Context, op, key string) error {
	if s.closed.Load() {
		return &Error{Op: op, Err: errClosed}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	switch {
	case key == "":
		return invalid("empty key")
	case len(key) > MaxKeyBytes:
		return invalid("key of %d bytes is longer than %d", len(key), MaxKeyBytes)
	}
	return nil
}

func wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	return &Error{Op: op, Err: err}
}

// shard returns the hash-tag group of key.
func shard(key string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	return int(h.Sum32() % Shards)
}

// tag returns the hash tag of a shard, "{0a3}".
func tag(sh int) string {
	const hex = "0123456789abcdef"
	return string([]byte{'{', hex[sh>>8&0xf], hex[sh>>4&0xf], hex[sh&0xf], '}'})
}

// recordKey is the Redis key of key's record: <prefix>{sss}r:<key>.
func (s *Store) recordKey(sh int, key string) string {
	return s.opt.Prefix + tag(sh) + "r:" + key
}

// indexKey is the Redis key of a shard's expiry index: <prefix>{sss}x, a sorted set of keys
// scored by expires_at.
func (s *Store) indexKey(sh int) string { return s.opt.Prefix + tag(sh) + "x" }

// keys returns the record and index keys of key.
func (s *Store) keys(key string) []string {
	sh := shard(key)
	return []string{s.recordKey(sh, key), s.indexKey(sh)}
}

func micros(t time.Time) string { return strconv.FormatInt(t.UnixMicro(), 10) }

// ttlMillis is the storage TTL of a record whose business window ends d from now.
func (s *Store) ttlMillis(d time.Duration) string {
	ms := (max(d, 0) + s.opt.TTLMargin + time.Millisecond - 1) / time.Millisecond
	return strconv.FormatInt(int64(max(ms, 1)), 10)
}

// trimBelow tells one claim in eight to drop up to 16 index entries of records whose storage
// TTL has run out (scored more than TTLMargin before now), so the index stays bounded when
// nobody calls Sweep; the others pass "" and skip it.
func (s *Store) trimBelow(now time.Time) string {
	if rand.IntN(8) != 0 {
		return ""
	}
	return micros(now.Add(-s.opt.TTLMargin))
}

func opID() string { return strconv.FormatUint(rand.Uint64(), 36) }

// Reserve implements idem.Store in one round trip (one script).
func (s *Store) Reserve(ctx context.Context, key, fingerprint string, now time.Time, lease, window time.Duration) (idem.Reservation, error) {
	if err := s.begin(ctx, "reserve", key); err != nil {
		return idem.Reservation{}, err
	}
	switch {
	case lease <= 0:
		return idem.Reservation{}, invalid("lease %s is not positive", lease)
	case window <= 0:
		return idem.Reservation{}, invalid("window %s is not positive", window)
	}
	now = now.Truncate(time.Microsecond)
	leaseUntil := now.Add(lease).Truncate(time.Microsecond)
	expires := now.Add(window).Truncate(time.Microsecond)
	v, err := reserveScript.Run(ctx, s.rdb, s.keys(key),
		key, fingerprint, micros(now), micros(leaseUntil), micros(expires),
		s.ttlMillis(window), s.trimBelow(now), opID()).Slice()
	if err != nil {
		return idem.Reservation{}, wrap("reserve", err)
	}
	if len(v) == 10 {
		if kind, _ := v[0].(int64); kind == 0 {
			names := [...]string{"fp", "st", "tok", "lease", "att", "crt", "cmp", "exp", "resp"}
			rec, err := decode(key, func(yield func(string, string) bool) {
				for i, n := range names {
					if val, ok := v[i+1].(string); ok && !yield(n, val) {
						return
					}
				}
			})
			if err != nil {
				return idem.Reservation{}, wrap("reserve", err)
			}
			return idem.Reservation{Record: rec}, nil
		}
	}
	if len(v) != 4 {
		return idem.Reservation{}, wrap("reserve", fmt.Errorf("unexpected reply of %d elements", len(v)))
	}
	kind, _ := v[0].(int64)
	tok, err1 := strconv.ParseInt(fmt.Sprint(v[1]), 10, 64)
	att, err2 := strconv.Atoi(fmt.Sprint(v[2]))
	crt, err3 := strconv.ParseInt(fmt.Sprint(v[3]), 10, 64)
	if err := errors.Join(err1, err2, err3); err != nil || (kind != 1 && kind != 2) {
		return idem.Reservation{}, wrap("reserve", fmt.Errorf("unexpected claim reply %v: %v", v, err))
	}
	return idem.Reservation{
		Claimed:  true,
		Takeover: kind == 2,
		Record: idem.Record{
			Key:         key,
			Fingerprint: fingerprint,
			State:       idem.StateInProgress,
			Token:       tok,
			LeaseUntil:  leaseUntil,
			Attempts:    att,
			CreatedAt:   time.UnixMicro(crt),
			ExpiresAt:   expires,
		},
	}, nil
}

// fenced runs a token-fenced script and maps its 0 answer to idem.ErrLeaseLost.
func (s *Store) fenced(ctx context.Context, op string, script *redis.Script, key string, args ...any) error {
	n, err := script.Run(ctx, s.rdb, s.keys(key), args...).Int64()
	switch {
	case err != nil:
		return wrap(op, err)
	case n == 0:
		return idem.ErrLeaseLost
	}
	return nil
}

// Complete implements idem.Store in one round trip (one script).
func (s *Store) Complete(ctx context.Context, key string, token int64, resp idem.Response, now, expiresAt time.Time) error {
	if err := s.begin(ctx, "complete", key); err != nil {
		return err
	}
	now = now.Truncate(time.Microsecond)
	expiresAt = expiresAt.Truncate(time.Microsecond)
	return s.fenced(ctx, "complete", completeScript, key,
		key, strconv.FormatInt(token, 10), idem.EncodeResponse(resp), micros(now), micros(expiresAt),
		s.ttlMillis(expiresAt.Sub(now)), opID())
}

// Release implements idem.Store in one round trip (one script). The record stays, expired,
// until Sweep or its storage TTL deletes it, so the next claim's token is larger than this one.
func (s *Store) Release(ctx context.Context, key string, token int64) error {
	if err := s.begin(ctx, "release", key); err != nil {
		return err
	}
	return s.fenced(ctx, "release", releaseScript, key, key, strconv.FormatInt(token, 10), opID())
}

// Extend implements idem.Store in one round trip (one script).
func (s *Store) Extend(ctx context.Context, key string, token int64, until time.Time) error {
	if err := s.begin(ctx, "extend", key); err != nil {
		return err
	}
	return s.fenced(ctx, "extend", extendScript, key, key, strconv.FormatInt(token, 10), micros(until.Truncate(time.Microsecond)))
}

// Get implements idem.Store with one HGETALL.
func (s *Store) Get(ctx context.Context, key string) (idem.Record, error) {
	if err := s.begin(ctx, "get", key); err != nil {
		return idem.Record{}, err
	}
	m, err := s.rdb.HGetAll(ctx, s.keys(key)[0]).Result()
	if err != nil {
		return idem.Record{}, wrap("get", err)
	}
	if len(m) == 0 {
		return idem.Record{}, idem.ErrNotFound
	}
	rec, err := decode(key, func(yield func(string, string) bool) {
		for n, v := range m {
			if !yield(n, v) {
				return
			}
		}
	})
	if err != nil {
		return idem.Record{}, wrap("get", err)
	}
	return rec, nil
}

// Delete removes key's record whatever its state (idem.Deleter), in one round trip.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := s.begin(ctx, "delete", key); err != nil {
		return err
	}
	return wrap("delete", deleteScript.Run(ctx, s.rdb, s.keys(key), key).Err())
}

// decode builds a record from its hash fields. A missing or malformed field is an error
// wrapping idem.ErrCorruptRecord, never a half-filled record.
func decode(key string, fields func(yield func(name, value string) bool)) (idem.Record, error) {
	rec := idem.Record{Key: key}
	var resp []byte
	var hasResp, hasTok, hasExp, hasLease, hasFP bool
	var err error
	num := func(name, v string) int64 {
		n, e := strconv.ParseInt(v, 10, 64)
		if e != nil && err == nil {
			err = fmt.Errorf("%w: field %s = %.40q", idem.ErrCorruptRecord, name, v)
		}
		return n
	}
	for name, v := range fields {
		switch name {
		case "fp":
			rec.Fingerprint, hasFP = v, true
		case "st":
			switch v {
			case "1":
				rec.State = idem.StateInProgress
			case "2":
				rec.State = idem.StateCompleted
			default:
				return idem.Record{}, fmt.Errorf("%w: state %.40q", idem.ErrCorruptRecord, v)
			}
		case "tok":
			rec.Token, hasTok = num(name, v), true
		case "lease":
			rec.LeaseUntil, hasLease = time.UnixMicro(num(name, v)), true
		case "att":
			rec.Attempts = int(num(name, v))
		case "crt":
			rec.CreatedAt = time.UnixMicro(num(name, v))
		case "cmp":
			rec.CompletedAt = time.UnixMicro(num(name, v))
		case "exp":
			rec.ExpiresAt, hasExp = time.UnixMicro(num(name, v)), true
		case "resp":
			resp, hasResp = []byte(v), true
		}
	}
	switch {
	case err != nil:
		return idem.Record{}, err
	case rec.State == 0 || !hasTok || !hasExp || !hasLease || !hasFP:
		return idem.Record{}, fmt.Errorf("%w: missing fields", idem.ErrCorruptRecord)
	case rec.State == idem.StateCompleted && !hasResp:
		return idem.Record{}, fmt.Errorf("%w: completed without a response", idem.ErrCorruptRecord)
	}
	if hasResp && rec.State == idem.StateCompleted {
		r, err := idem.DecodeResponse(resp)
		if err != nil {
			return idem.Record{}, err
		}
		rec.Response = &r
	}
	return rec, nil
}

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
	"github.com/idemkit/idem/store/internal/storeerr"
	"github.com/idemkit/idem/store/storekit"
)

var (
	_ idem.Store        = (*Store)(nil)
	_ idem.Deleter      = (*Store)(nil)
	_ idem.SelfExpiring = (*Store)(nil)
)

// Shards is how many hash-tag groups the records of one Prefix are spread over. A record's
// group is FNV-1a(key) mod Shards, written as a hash tag in the record's Redis key, so a key
// that itself contains braces cannot choose its slot. It is part of the key layout, hence a
// constant.
const Shards = 1024

// Options configure a Store. Only Client is required.
type Options struct {
	// Client is the Redis client: a *redis.Client (standalone, or through Sentinel with
	// redis.NewFailoverClient) or a *redis.ClusterClient. Required. The caller owns it: Close
	// does not close it.
	//
	// Create it with ContextTimeoutEnabled: true. Without it, go-redis ignores the deadline
	// of a call's context and waits for its own ReadTimeout (3s by default), so a Redis that
	// stops answering holds every call, and the engine's StoreTimeout, that long
	// (TestFrozenServerCallsEndAtDeadline measured it). With AutoPipeline the store waits no
	// longer than the context either way. storeurl sets it on the clients it creates.
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
	// AutoPipeline sends the store's commands through the client's automatic pipeliner
	// (go-redis's AsyncAutoPipeline, on a *redis.Client or *redis.ClusterClient; experimental
	// in go-redis): the commands of concurrent calls share a connection and go out together,
	// one write and one read for many calls instead of one connection, write and read each.
	// Every call still waits for its own reply, so it costs the same round trips and gets the
	// same answers; under concurrency the client and redis-server spend far less CPU per
	// operation (docs/benchmarks.md: about half for a new key here). A call waits no longer
	// than its context allows; its command may still run after that, like one whose reply was
	// lost. go-redis sends every command of a batch whose connection broke again, and the
	// store answers those as their first execution did (every write carries the id of the
	// call that made it). New fails if the client has no pipeliner (another UniversalClient)
	// or its pipeliner options are invalid. Default off.
	//
	// Tested with it on: the conformance suite on standalone and Cluster, a Redis restart and
	// a Cluster failover under load. Not with slots moving: while TestSlotMigrationUnderLoad
	// moved slots key by key, the pipeliner's batches waited through go-redis's redirect
	// retries (calls for other keys in the same batch waiting with them, until their
	// deadlines), and the test's resharding did not complete in three runs of three; the
	// store's answers stayed safe (one winner per key, errors failing closed). Leave it off on a
	// Cluster that is being resharded.
	AutoPipeline bool
}

// Store is an idem.Store on Redis, standalone or Cluster. It is safe for concurrent use by
// many goroutines and processes. Create it with New.
type Store struct {
	rdb    redis.UniversalClient
	ap     *redis.AutoPipeliner // the client's, when Options.AutoPipeline is set
	opt    Options
	closed atomic.Bool
	// timeIndexed is set once List found every shard's time index complete (backfill).
	timeIndexed atomic.Bool

	// balance is positive while most Reserves find a record, and Reserve then starts with a
	// plain GET (see readFirst).
	balance atomic.Int64
	pinned  int // tests: 1 always reads first, -1 never; 0 chooses by balance

	sweepMu sync.Mutex
	cursors map[string]uint64 // per node address, the SCAN cursor the next Sweep resumes at
}

// New returns a Store. It fails with an error wrapping idem.ErrInvalidInput, naming the field,
// when an option is invalid. It makes no call to Redis.
func New(opt Options) (*Store, error) {
	opt.Prefix = cmp.Or(opt.Prefix, "idem:")
	opt.TTLMargin = cmp.Or(opt.TTLMargin, 5*time.Minute)
	switch {
	case opt.Client == nil:
		return nil, storeerr.Option("redisstore", "Options.Client", "is nil")
	case strings.ContainsAny(opt.Prefix, "{}"):
		return nil, storeerr.Option("redisstore", "Options.Prefix", "%q contains '{' or '}'", opt.Prefix)
	case len(opt.Prefix) > 256:
		return nil, storeerr.Option("redisstore", "Options.Prefix", "of %d bytes is longer than 256", len(opt.Prefix))
	case opt.TTLMargin < 0:
		return nil, storeerr.Option("redisstore", "Options.TTLMargin", "%s is negative", opt.TTLMargin)
	}
	s := &Store{rdb: opt.Client, opt: opt}
	if opt.AutoPipeline {
		c, ok := opt.Client.(interface {
			AsyncAutoPipeline() (*redis.AutoPipeliner, error)
		})
		if !ok {
			return nil, storeerr.Option("redisstore", "Options.AutoPipeline", "a %T has no automatic pipeliner", opt.Client)
		}
		ap, err := c.AsyncAutoPipeline()
		if err != nil {
			return nil, storeerr.Option("redisstore", "Options.AutoPipeline", "%v", err)
		}
		s.ap = ap
	}
	return s, nil
}

// exec sends cmd and waits for its reply: on the client, or queued on its automatic
// pipeliner, waiting no longer than ctx allows (the command may still run after that, as one
// whose reply was lost would).
func (s *Store) exec(ctx context.Context, cmd redis.Cmder) error {
	if s.ap == nil {
		return s.rdb.Process(ctx, cmd)
	}
	return s.ap.Submit(ctx, cmd).WaitContext(ctx)
}

// eval runs script on keys (a record and its shard's index): EVALSHA, and EVAL when the node
// does not have the script yet.
func (s *Store) eval(ctx context.Context, script *redis.Script, keys []string, args ...any) (any, error) {
	if s.ap == nil {
		return script.Run(ctx, s.rdb, keys, args...).Result()
	}
	cmdArgs := make([]any, 0, 3+len(keys)+len(args))
	cmdArgs = append(cmdArgs, "evalsha", script.Hash(), len(keys))
	for _, k := range keys {
		cmdArgs = append(cmdArgs, k)
	}
	cmd := redis.NewCmd(ctx, append(cmdArgs, args...)...)
	err := s.exec(ctx, cmd)
	switch {
	case err == nil:
		return cmd.Val(), nil
	case redis.HasErrorPrefix(err, "NOSCRIPT"):
		// Once per node and script (or after SCRIPT FLUSH): sent directly, not pipelined.
		return script.Eval(ctx, s.rdb, keys, args...).Result()
	}
	return nil, err
}

// Options returns the store's options with defaults filled in.
func (s *Store) Options() Options { return s.opt }

// Close makes every later call fail with an error matching idem.ErrStoreUnavailable. It does
// not close the client, which the caller owns. It is safe to call more than once.
func (s *Store) Close() error {
	s.closed.Store(true)
	return nil
}

func invalid(format string, args ...any) error {
	return storeerr.Invalid("redisstore", format, args...)
}

// ready fails if the store is closed or ctx is done.
func (s *Store) ready(ctx context.Context) error { return storeerr.Ready(ctx, s.closed.Load()) }

// begin checks what every keyed operation checks first.
func (s *Store) begin(ctx context.Context, key string) error {
	if err := s.ready(ctx); err != nil {
		return err
	}
	return idem.CheckKey(key)
}

// wrap makes err, a failure of a Redis call, an *idem.StoreError of op.
func wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	return &idem.StoreError{Op: op, Err: fmt.Errorf("redisstore: %w", err)}
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

// indexKey is the Redis key of a shard's index: <prefix>{sss}i (see scripts.go).
func (s *Store) indexKey(sh int) string {
	return s.opt.Prefix + tag(sh) + "i"
}

// timeKey is the Redis key of a shard's time index: <prefix>{sss}t (see scripts.go).
func (s *Store) timeKey(sh int) string {
	return s.opt.Prefix + tag(sh) + "t"
}

// keys returns the record key of key and its shard's index and time index keys, as the
// scripts take them.
func (s *Store) keys(key string) []string {
	sh := shard(key)
	return []string{s.recordKey(sh, key), s.indexKey(sh), s.timeKey(sh)}
}

// base is the length of a record key before the store key (<prefix>{sss}r:), as the scripts
// take it to find the store key in the record key.
func (s *Store) base() string { return strconv.Itoa(len(s.opt.Prefix) + len("{sss}r:")) }

func micros(t time.Time) string { return strconv.FormatInt(t.UnixMicro(), 10) }

// ttl is the storage TTL of a record whose TTL runs out d from now, in whole
// milliseconds.
func (s *Store) ttl(d time.Duration) time.Duration {
	ms := (max(d, 0) + s.opt.TTLMargin + time.Millisecond - 1) / time.Millisecond
	return max(ms, 1) * time.Millisecond
}

// ttlMillis is ttl in milliseconds, as the scripts take it.
func (s *Store) ttlMillis(d time.Duration) string {
	return strconv.FormatInt(int64(s.ttl(d)/time.Millisecond), 10)
}

func opID() string { return strconv.FormatUint(rand.Uint64(), 36) }

// Reserve implements idem.Store. Its first command is one of two, whichever this Store has
// found cheaper for the keys it has been asked about lately (see readFirst):
//
//   - the claim script: SET … PX … NX GET, which writes a new claim and its index member if the
//     key has no record, and otherwise returns the record untouched; a new key, an in-flight key
//     and a replay cost one round trip, a script each;
//   - a plain GET, when most Reserves find a record: an in-flight key and a replay cost one GET,
//     and a key without a record costs the GET and then the claim script.
//
// Only the scripts write, and each decides on the record it finds when it runs: a GET is never
// trusted for a claim. When the record found (by either command) may be claimable (past
// expires_at, released, or a stale lease of the same fingerprint to take over), Reserve runs
// the reserve script, which decides atomically on the record it finds then. The claim (the
// claim script's SET, or the reserve script) writes the route into the record.
func (s *Store) Reserve(ctx context.Context, req idem.ReserveRequest) (idem.Reservation, error) {
	key, fingerprint, window := req.Key, req.Fingerprint, req.TTL
	if err := s.begin(ctx, key); err != nil {
		return idem.Reservation{}, err
	}
	switch {
	case req.Lease <= 0:
		return idem.Reservation{}, invalid("lease %s is not positive", req.Lease)
	case window <= 0:
		return idem.Reservation{}, invalid("TTL %s is not positive", window)
	}
	now := req.Now.Truncate(time.Microsecond)
	leaseUntil := now.Add(req.Lease).Truncate(time.Microsecond)
	expires := now.Add(window).Truncate(time.Microsecond)
	keys := s.keys(key)
	op := opID()
	route := storekit.CleanRoute(req.Route)
	var reqBytes []byte // the request's encoding; nil for none
	if req.Request != nil {
		reqBytes = storekit.EncodeRequest(*req.Request)
	}
	if s.readFirst() {
		get := redis.NewStringCmd(ctx, "get", keys[0])
		err := s.exec(ctx, get)
		switch {
		case errors.Is(err, redis.Nil):
			// No record: the claim script follows (and counts this call).
		case err != nil:
			return idem.Reservation{}, wrap("reserve", err)
		default:
			s.found(true)
			rec, _, err := decode(key, get.Val())
			if err != nil {
				return idem.Reservation{}, wrap("reserve", err)
			}
			if !claimable(rec, fingerprint, now) {
				return idem.Reservation{Record: rec}, nil
			}
			return s.reserveScript(ctx, keys, key, fingerprint, route, reqBytes, now, leaseUntil, expires, window, op)
		}
	}
	claim := idem.Reservation{
		Claimed: true,
		Record: idem.Record{
			Key:         key,
			Fingerprint: fingerprint,
			State:       idem.StateInProgress,
			Token:       storekit.NextToken(0, now),
			LeaseUntil:  leaseUntil,
			Attempts:    1,
			Starts:      1,
			CreatedAt:   now,
			ExpiresAt:   expires,
			Route:       route,
		},
	}
	if reqBytes != nil {
		r, _ := storekit.DecodeRequest(reqBytes) // the store's own copy; its encoding decodes
		claim.Record.Request = &r
	}
	reply, err := s.eval(ctx, claimScript, keys, encodeClaim(claim.Record, reqBytes, op), s.ttlMillis(window), s.base(), micros(now))
	switch {
	case errors.Is(err, redis.Nil):
		s.found(false)
		return claim, nil // there was no record: the claim is written
	case err != nil:
		return idem.Reservation{}, wrap("reserve", err)
	}
	s.found(true)
	old, ok := reply.(string)
	if !ok {
		return idem.Reservation{}, wrap("reserve", fmt.Errorf("unexpected reply %T", reply))
	}
	rec, recOp, err := decode(key, old)
	if err != nil {
		return idem.Reservation{}, wrap("reserve", err)
	}
	if rec.State == idem.StateInProgress && recOp == op && rec.ExpiresAt.After(now) {
		// go-redis resent this very script after a lost reply: the claim is ours.
		return claim, nil
	}
	if !claimable(rec, fingerprint, now) {
		return idem.Reservation{Record: rec}, nil
	}
	return s.reserveScript(ctx, keys, key, fingerprint, route, reqBytes, now, leaseUntil, expires, window, op)
}

// claimable reports whether a Reserve at now of fingerprint may claim the record rec, read
// outside a script: rec is past its expires_at (or released), or in progress with a lease
// run out and the same fingerprint (a takeover). Only the reserve script acts on it, after
// checking again the record it finds then; a record that is not claimable is the answer.
func claimable(rec idem.Record, fingerprint string, now time.Time) bool {
	if !rec.ExpiresAt.After(now) {
		return true
	}
	return rec.State == idem.StateInProgress && !rec.LeaseUntil.After(now) && rec.Fingerprint == fingerprint
}

// How Reserve chooses its first command. A Reserve that finds a record (a replay, a
// duplicate in flight) costs a GET when it reads first, and the claim script otherwise: the
// script costs redis-server several times a GET's execution (the Lua call), about 0.4 of a
// round trip in all (docs/bench/redis.md). A Reserve of a key without a record costs one
// round trip more when it reads first. So reading first pays when more than about 5 in 7
// Reserves find a record. found adds foundWeight to a running balance for each Reserve that
// found a record and subtracts absentWeight for each that did not, within ±balanceLimit, and
// Reserve reads first while the balance is positive: the choice follows the mix of the last
// few hundred calls of this Store. Both paths return the same answers; only their cost
// differs.
const (
	foundWeight  = 2
	absentWeight = 5
	balanceLimit = 512
)

// readFirst reports whether Reserve should start with a GET.
func (s *Store) readFirst() bool {
	if s.pinned != 0 {
		return s.pinned > 0
	}
	return s.balance.Load() > 0
}

// found records whether a Reserve found a record.
func (s *Store) found(yes bool) {
	d := int64(-absentWeight)
	if yes {
		d = foundWeight
	}
	switch v := s.balance.Add(d); {
	case v > balanceLimit:
		s.balance.CompareAndSwap(v, balanceLimit)
	case v < -balanceLimit:
		s.balance.CompareAndSwap(v, -balanceLimit)
	}
}

// reserveScript is the second round trip of a Reserve that met a record it may claim.
func (s *Store) reserveScript(ctx context.Context, keys []string, key, fingerprint, route string, reqBytes []byte, now, leaseUntil, expires time.Time, window time.Duration, op string) (idem.Reservation, error) {
	reply, err := s.eval(ctx, reserveScript, keys,
		fingerprint, micros(now), micros(leaseUntil), micros(expires), s.ttlMillis(window), op, s.base(), route, string(appendRequest(nil, reqBytes)))
	v, ok := reply.([]any)
	if err == nil && !ok {
		err = fmt.Errorf("unexpected reply %T", reply)
	}
	if err != nil {
		return idem.Reservation{}, wrap("reserve", err)
	}
	if len(v) == 2 {
		if kind, _ := v[0].(int64); kind == 0 {
			old, _ := v[1].(string)
			rec, _, err := decode(key, old)
			if err != nil {
				return idem.Reservation{}, wrap("reserve", err)
			}
			return idem.Reservation{Record: rec}, nil
		}
	}
	if len(v) != 6 {
		return idem.Reservation{}, wrap("reserve", fmt.Errorf("unexpected reply of %d elements", len(v)))
	}
	route, _ = v[4].(string)
	qseg, _ := v[5].(string)
	request, err := decodeRequestSeg(qseg)
	if err != nil {
		return idem.Reservation{}, wrap("reserve", err)
	}
	kind, _ := v[0].(int64)
	tok, err1 := strconv.ParseInt(fmt.Sprint(v[1]), 10, 64)
	att, sts, err2 := parseAttempts(fmt.Sprint(v[2]))
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
			Starts:      sts,
			CreatedAt:   time.UnixMicro(crt),
			ExpiresAt:   expires,
			Route:       route,
			Request:     request,
		},
	}, nil
}

// decodeRequestSeg decodes a request's stored segment (q<len>|<encoding>): nil for "".
func decodeRequestSeg(seg string) (*idem.Request, error) {
	if seg == "" {
		return nil, nil
	}
	n, enc, ok := strings.Cut(strings.TrimPrefix(seg, "q"), "|")
	if l, err := strconv.Atoi(n); !ok || err != nil || l != len(enc) || seg[0] != 'q' {
		return nil, fmt.Errorf("%w: request segment", idem.ErrCorruptRecord)
	}
	r, err := storekit.DecodeRequest([]byte(enc))
	if err != nil {
		return nil, err
	}
	return &r, nil
}

// fenced runs a token-fenced script and maps its 0 answer to idem.ErrLeaseLost.
func (s *Store) fenced(ctx context.Context, op string, script *redis.Script, key string, args ...any) error {
	reply, err := s.eval(ctx, script, s.keys(key), args...)
	n, ok := reply.(int64)
	switch {
	case err != nil:
		return wrap(op, err)
	case !ok:
		return wrap(op, fmt.Errorf("unexpected reply %T", reply))
	case n == 0:
		return idem.ErrLeaseLost
	}
	return nil
}

// Complete implements idem.Store in one round trip (one script).
func (s *Store) Complete(ctx context.Context, key string, token int64, resp idem.Response, now, expiresAt time.Time) error {
	if err := s.begin(ctx, key); err != nil {
		return err
	}
	now = now.Truncate(time.Microsecond)
	expiresAt = expiresAt.Truncate(time.Microsecond)
	return s.fenced(ctx, "complete", completeScript, key,
		strconv.FormatInt(token, 10), storekit.EncodeResponse(resp), micros(now), micros(expiresAt),
		s.ttlMillis(expiresAt.Sub(now)), opID(), s.base())
}

// Release implements idem.Store in one round trip (one script). The record stays, expired,
// until Sweep or its storage TTL deletes it, so the next claim's token is larger than this one.
func (s *Store) Release(ctx context.Context, key string, token int64) error {
	if err := s.begin(ctx, key); err != nil {
		return err
	}
	return s.fenced(ctx, "release", releaseScript, key, strconv.FormatInt(token, 10), opID())
}

// Extend implements idem.Store in one round trip (one script).
func (s *Store) Extend(ctx context.Context, key string, token int64, until time.Time) error {
	if err := s.begin(ctx, key); err != nil {
		return err
	}
	return s.fenced(ctx, "extend", extendScript, key, strconv.FormatInt(token, 10), micros(until.Truncate(time.Microsecond)))
}

// Get implements idem.Store with one GET.
func (s *Store) Get(ctx context.Context, key string) (idem.Record, error) {
	if err := s.begin(ctx, key); err != nil {
		return idem.Record{}, err
	}
	get := redis.NewStringCmd(ctx, "get", s.recordKey(shard(key), key))
	err := s.exec(ctx, get)
	switch {
	case errors.Is(err, redis.Nil):
		return idem.Record{}, idem.ErrNotFound
	case err != nil:
		return idem.Record{}, wrap("get", err)
	}
	rec, _, err := decode(key, get.Val())
	if err != nil {
		return idem.Record{}, wrap("get", err)
	}
	return rec, nil
}

// Delete removes key's record whatever its state, and its index member (idem.Deleter), with
// one script.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := s.begin(ctx, key); err != nil {
		return err
	}
	_, err := s.eval(ctx, deleteScript, s.keys(key), s.base())
	return wrap("delete", err)
}

// parseAttempts reads a stored attempts field: the attempts, then s and the start count when
// it differs from them (see scripts.go). A record written before starts were counted has
// only its attempts, and that is its start count.
func parseAttempts(f string) (attempts, starts int, err error) {
	a, s, found := strings.Cut(f, "s")
	attempts, err = strconv.Atoi(a)
	starts = attempts
	if err == nil && found {
		starts, err = strconv.Atoi(s)
	}
	if err == nil && (attempts < 0 || starts < 0) {
		err = fmt.Errorf("negative count in %q", f)
	}
	return attempts, max(starts, attempts), err
}

// encodeClaim is the stored form of a new claim (see scripts.go for the layout).
func encodeClaim(rec idem.Record, request []byte, op string) []byte {
	b := make([]byte, 0, 96+len(op)+len(rec.Fingerprint)+len(rec.Route)+len(request))
	b = append(b, "1|"...)
	b = strconv.AppendInt(b, rec.Token, 10)
	b = append(b, '|')
	b = strconv.AppendInt(b, rec.LeaseUntil.UnixMicro(), 10)
	b = append(b, "|1|"...)
	b = strconv.AppendInt(b, rec.CreatedAt.UnixMicro(), 10)
	b = append(b, "||"...)
	b = strconv.AppendInt(b, rec.ExpiresAt.UnixMicro(), 10)
	b = append(b, '|')
	b = append(b, op...)
	b = append(b, '|')
	b = strconv.AppendInt(b, int64(len(rec.Fingerprint)), 10)
	b = append(b, '|')
	b = append(b, rec.Fingerprint...)
	return appendRequest(appendRoute(b, rec.Route), request)
}

// appendRequest appends the stored segment of a request's encoding: nothing for none, else
// q<length>|<encoding>.
func appendRequest(b, request []byte) []byte {
	if request == nil {
		return b
	}
	b = append(b, 'q')
	b = strconv.AppendInt(b, int64(len(request)), 10)
	b = append(b, '|')
	return append(b, request...)
}

// appendRoute appends the stored form of a route: nothing for none, else r<length>|<route>.
func appendRoute(b []byte, route string) []byte {
	if route == "" {
		return b
	}
	b = append(b, 'r')
	b = strconv.AppendInt(b, int64(len(route)), 10)
	b = append(b, '|')
	return append(b, route...)
}

// decode reads a stored record, and the id of the call that last wrote it. Anything else is
// an error wrapping idem.ErrCorruptRecord, never a half-filled record.
func decode(key, v string) (idem.Record, string, error) {
	rec, st, op, rest, _, err := decodeFields(key, v)
	if err != nil {
		return idem.Record{}, "", err
	}
	rec.State = st
	if st == idem.StateCompleted {
		r, err := storekit.DecodeResponse([]byte(rest))
		if err != nil {
			return idem.Record{}, "", err
		}
		rec.Response = &r
	}
	return rec, op, nil
}

// errShort is decodeFields' answer to a value that ends within the fingerprint, the route or the
// request.
var errShort = fmt.Errorf("%w: value ends within the fingerprint, the route or the request", idem.ErrCorruptRecord)

// decodeFields reads a stored record's fields, fingerprint and route; rest is what follows
// (the response of a completed record), op the id of the call that last wrote it, and fpEnd
// the offset in v where the fingerprint and the route end (with errShort: at least how far
// the value must be read to hold them). Anything else is an error wrapping
// idem.ErrCorruptRecord.
func decodeFields(key, v string) (rec idem.Record, st idem.State, op, rest string, fpEnd int, err error) {
	var f [9]string
	rest = v
	for i := range f {
		var ok bool
		if f[i], rest, ok = strings.Cut(rest, "|"); !ok {
			return idem.Record{}, 0, "", "", 0, fmt.Errorf("%w: %d fields, want 9 and the fingerprint", idem.ErrCorruptRecord, i)
		}
	}
	num := func(i int, name string, empty bool) int64 {
		if empty && f[i] == "" {
			return 0
		}
		n, e := strconv.ParseInt(f[i], 10, 64)
		if (e != nil || n < 0) && err == nil {
			err = fmt.Errorf("%w: %s = %.40q", idem.ErrCorruptRecord, name, f[i])
		}
		return n
	}
	rec = idem.Record{
		Key:        key,
		Token:      num(1, "token", false),
		LeaseUntil: time.UnixMicro(num(2, "lease_until", false)),
		CreatedAt:  time.UnixMicro(num(4, "created_at", false)),
		ExpiresAt:  time.UnixMicro(num(6, "expires_at", false)),
	}
	if a, s, e := parseAttempts(f[3]); e != nil {
		err = cmp.Or(err, fmt.Errorf("%w: attempts = %.40q", idem.ErrCorruptRecord, f[3]))
	} else {
		rec.Attempts, rec.Starts = a, s
	}
	if c := num(5, "completed_at", true); f[5] != "" {
		rec.CompletedAt = time.UnixMicro(c)
	}
	fpLen := num(8, "fingerprint length", false)
	switch {
	case err != nil:
		return idem.Record{}, 0, "", "", 0, err
	case fpLen > int64(len(rest)):
		// Far enough for the fingerprint and the longest route after it.
		need := len(v) - len(rest) + int(min(fpLen, 1<<30)) + len("r256|") + idem.MaxRouteLen
		return idem.Record{}, 0, "", "", need, fmt.Errorf("%w (%d bytes in %d)", errShort, fpLen, len(rest))
	}
	rec.Fingerprint, rest = rest[:fpLen], rest[fpLen:]
	if len(rest) > 0 && rest[0] == 'r' {
		at := len(v) - len(rest) // where the route's segment begins
		n, after, ok := strings.Cut(rest[1:], "|")
		if !ok && len(rest) < len("r256|") {
			// Cut short before the route's length ends: enough for the longest route.
			return idem.Record{}, 0, "", "", at + len("r256|") + idem.MaxRouteLen, errShort
		}
		rl, e := strconv.Atoi(n)
		switch {
		case !ok || e != nil || rl < 0:
			return idem.Record{}, 0, "", "", 0, fmt.Errorf("%w: route length %.40q", idem.ErrCorruptRecord, n)
		case rl > len(after):
			return idem.Record{}, 0, "", "", len(v) - len(after) + min(rl, 1<<30), fmt.Errorf("%w (route of %d bytes in %d)", errShort, rl, len(after))
		}
		rec.Route, rest = after[:rl], after[rl:]
	}
	if len(rest) > 0 && rest[0] == 'q' {
		n, after, ok := strings.Cut(rest[1:], "|")
		if !ok && len(rest) < len("q")+20 {
			// Cut short before the request's length ends: the whole value, then.
			return idem.Record{}, 0, "", "", 1 << 30, errShort
		}
		ql, e := strconv.Atoi(n)
		switch {
		case !ok || e != nil || ql < 0:
			return idem.Record{}, 0, "", "", 0, fmt.Errorf("%w: request length %.40q", idem.ErrCorruptRecord, n)
		case ql > len(after):
			return idem.Record{}, 0, "", "", len(v) - len(after) + min(ql, 1<<30), fmt.Errorf("%w (request of %d bytes in %d)", errShort, ql, len(after))
		}
		r, e := storekit.DecodeRequest([]byte(after[:ql]))
		if e != nil {
			return idem.Record{}, 0, "", "", 0, e
		}
		rec.Request, rest = &r, after[ql:]
	}
	switch f[0] {
	case "1":
		st = idem.StateInProgress
	case "2":
		st = idem.StateCompleted
	default:
		return idem.Record{}, 0, "", "", 0, fmt.Errorf("%w: state %.40q", idem.ErrCorruptRecord, f[0])
	}
	return rec, st, f[7], rest, len(v) - len(rest), nil
}

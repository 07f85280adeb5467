// Package memstore is an in-memory idem.Store for tests and single-process use.
//
// Records live in memory guarded by a mutex; nothing survives the process. Use sqlitestore
// for an embedded store that does.
package memstore

import (
	"context"
	"encoding/hex"
	"fmt"
	"hash/maphash"
	"math"
	"slices"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/storekit"
)

var (
	_ idem.Store   = (*Store)(nil)
	_ idem.Deleter = (*Store)(nil)
)

// Store is an in-memory idem.Store. The zero value is not usable; call New.
//
// It is laid out for the garbage collector, which marks every record the store retains on
// each cycle: a record is one string (its key, fingerprint, route and encoded response, end to end;
// a hex fingerprint as the 32 bytes it spells) and a fixed-size head without pointers, kept at
// the same position of two dense arrays, and the map takes a 32-bit hash of the key to that
// position (8 bytes a slot), so neither the map nor the heads hold a pointer. The collector follows one pointer per record, to an object it need not scan. The
// arrays are in pages, so that growing them copies nothing, and removing a record moves the
// last one into its place, so that they stay dense and empty pages can be given back.
type Store struct {
	mu     sync.Mutex
	seed   maphash.Seed
	mask   uint32           // the bits of a key's hash the index uses: all, but in tests of collisions
	index  map[uint32]int32 // hash of the key → position of the first record with that hash
	n      int32            // records held: positions 0 to n-1
	heads  []*[pageSize]head
	blobs  []*[pageSize]string // the key, the fingerprint (packed), then the encoded response
	closed bool
	// room is how many bytes a claim's blob is given after its key and fingerprint, for the
	// response Complete appends there: the size of the last response stored, up to maxRoom.
	// Responses of one service tend to be alike, so a new key costs one allocation, not two.
	room int32
	// maxRecords and maxBytes bound what the store holds (0: no bound); bytes is what it
	// holds now, as cost counts it.
	maxRecords int32
	maxBytes   int64
	bytes      int64
	// reclaimAt is at most the earliest expiry of a record held (Unix µs): a full store looks
	// for expired records to reclaim only once it has passed.
	reclaimAt int64
}

// Options bound what a Store made by NewBounded holds. The zero value is no bound.
type Options struct {
	// MaxRecords is the most records the store holds, expired ones not yet reclaimed included.
	// 0 (the default): no bound.
	MaxRecords int
	// MaxBytes bounds the bytes the store's records take: their keys, fingerprints, routes,
	// retained requests and stored responses, plus a fixed overhead per record. A claim that would take the store
	// past it is refused; completing a claim never is, so the responses of claims in flight
	// may take the store past it until expired records are reclaimed. 0 (the default): no
	// bound.
	MaxBytes int64
}

// ErrFull is returned, wrapped, by Reserve when a new claim would take a bounded store past
// one of its Options' limits and no expired record could be reclaimed to make room. Records
// that are in progress or completed are never removed before they expire to make room. It
// matches idem.ErrStoreUnavailable, so the engine fails closed: no effect runs, and an HTTP
// face answers 503.
var ErrFull error = fullError{}

type fullError struct{}

func (fullError) Error() string        { return "memstore: full" }
func (fullError) Is(target error) bool { return target == idem.ErrStoreUnavailable }

// recordOverhead is what a record costs beyond its blob: its head, its blob's string header
// and its slot in the index.
const recordOverhead = int64(unsafe.Sizeof(head{}) + unsafe.Sizeof("") + 16)

// maxRoom bounds the room a claim's blob is given for its response: larger responses are
// stored in an allocation of their own.
const maxRoom = 1024

// pageSize is how many records a page holds.
const pageSize = 1024

// head returns record i's head.
func (s *Store) head(i int32) *head { return &s.heads[uint32(i)/pageSize][uint32(i)%pageSize] }

// blob returns record i's string.
func (s *Store) blob(i int32) *string { return &s.blobs[uint32(i)/pageSize][uint32(i)%pageSize] }

// head is a record's fixed part: times as Unix microseconds, and where its blob's parts end.
type head struct {
	token    int64
	lease    int64 // Unix µs; 0 once released
	expires  int64 // Unix µs; 0 once released
	created  int64 // Unix µs
	done     int64 // completed_at, Unix µs; 0 while in progress
	keyLen   int32
	fpLen    int32
	next     int32 // the next record whose key has the same hash, or -1
	attempts int32
	starts   int32 // Record.Starts
	room     int32 // bytes allocated after the blob's end, that Complete may write once
	reqLen   int32 // the encoded request (Record.Request) after the route; 0: none
	routeLen uint16
	state    idem.State
	packed   bool // the fingerprint is kept as the 32 bytes its 64 hex digits spell
}

// New returns an empty Store without bounds: it holds every record until it expires and is
// swept. Use NewBounded for a store that outside callers can fill.
func New() *Store {
	return &Store{seed: maphash.MakeSeed(), mask: ^uint32(0), index: make(map[uint32]int32), reclaimAt: math.MaxInt64}
}

// NewBounded returns an empty Store that holds at most opt.MaxRecords records taking at most
// about opt.MaxBytes bytes. When a new claim would pass either bound, the store first
// reclaims the records that have expired; if that does not make room, Reserve fails with an
// error matching ErrFull (and idem.ErrStoreUnavailable). A record in progress or completed is
// never removed before it expires. A negative bound is an error wrapping idem.ErrInvalidInput.
func NewBounded(opt Options) (*Store, error) {
	switch {
	case opt.MaxRecords < 0 || opt.MaxRecords > math.MaxInt32:
		return nil, &idem.OptionError{Package: "memstore", Field: "Options.MaxRecords", Problem: fmt.Sprintf("%d is out of range", opt.MaxRecords)}
	case opt.MaxBytes < 0:
		return nil, &idem.OptionError{Package: "memstore", Field: "Options.MaxBytes", Problem: fmt.Sprintf("%d is negative", opt.MaxBytes)}
	}
	s := New()
	s.maxRecords, s.maxBytes = int32(opt.MaxRecords), opt.MaxBytes
	return s, nil
}

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
	return int(s.n)
}

// Options returns the store's bounds (all zero for a store made by New).
func (s *Store) Options() Options {
	return Options{MaxRecords: int(s.maxRecords), MaxBytes: s.maxBytes}
}

// Bytes returns the bytes the store's records take, as Options.MaxBytes counts them.
func (s *Store) Bytes() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bytes
}

// cost is what record i takes, as Options.MaxBytes counts it.
func (s *Store) cost(i int32) int64 {
	return int64(len(*s.blob(i))) + int64(s.head(i).room) + recordOverhead
}

// expiresAt notes that a record now expires at t (Unix µs), for reclaim.
func (s *Store) expiresAt(t int64) { s.reclaimAt = min(s.reclaimAt, t) }

// fits reports whether the store has room for one more record (grow) costing more bytes.
func (s *Store) fits(grow bool, more int64) bool {
	if grow && s.maxRecords > 0 && s.n >= s.maxRecords {
		return false
	}
	return s.maxBytes <= 0 || more <= 0 || s.bytes+more <= s.maxBytes
}

// reclaim removes every record expired at now, if one may be, and reports whether it removed
// any. It costs a pass over the store, made at most once per expiry that passes.
func (s *Store) reclaim(now int64) bool {
	if now < s.reclaimAt {
		return false
	}
	removed := false
	next := int64(math.MaxInt64)
	for i := s.n - 1; i >= 0; i-- { // from the end, as Sweep: remove moves the last record here
		if e := s.head(i).expires; e <= now {
			s.remove(i)
			removed = true
		} else {
			next = min(next, e)
		}
	}
	s.reclaimAt = next
	return removed
}

// full is the error a claim that finds no room gets.
func (s *Store) full(grow bool) error {
	if grow && s.maxRecords > 0 && s.n >= s.maxRecords {
		return fmt.Errorf("%w: it holds %d records, the most it may (MaxRecords); none has expired", ErrFull, s.n)
	}
	return fmt.Errorf("%w: its records take %d bytes of the %d it may (MaxBytes); none has expired", ErrFull, s.bytes, s.maxBytes)
}

func (s *Store) lock(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return idem.ErrClosed
	}
	return nil
}

func (h *head) expired(now int64) bool { return h.expires <= now }
func (h *head) leaseExpired(now int64) bool {
	return h.state == idem.StateInProgress && h.lease <= now
}

// hash returns the map's key for key. Keys may share one: find compares the keys themselves.
func (s *Store) hash(key string) uint32 { return uint32(maphash.String(s.seed, key)) & s.mask }

// key returns record i's key.
func (s *Store) key(i int32) string { return (*s.blob(i))[:s.head(i).keyLen] }

// find returns the position of key's record.
func (s *Store) find(key string) (int32, bool) {
	i, _, ok := s.lookup(s.hash(key), key)
	return i, ok
}

// lookup returns the position of key's record, whose hash is h, and the first of the records
// whose keys hash to h (-1 if none), so that a record added for key need not look it up again.
func (s *Store) lookup(h uint32, key string) (i, first int32, ok bool) {
	first, ok = s.index[h]
	if !ok {
		return 0, -1, false
	}
	for i = first; i >= 0; i = s.head(i).next {
		if s.key(i) == key {
			return i, first, true
		}
	}
	return 0, first, false
}

// link makes ref the position of the record whose key hashes to h and was at position from.
func (s *Store) link(h uint32, from, ref int32) {
	first := s.index[h]
	if first == from {
		if ref < 0 {
			delete(s.index, h)
		} else {
			s.index[h] = ref
		}
		return
	}
	p := first
	for s.head(p).next != from {
		p = s.head(p).next
	}
	s.head(p).next = ref
}

// Reserve implements idem.Store.
func (s *Store) Reserve(ctx context.Context, req idem.ReserveRequest) (idem.Reservation, error) {
	key, fingerprint, route, now := req.Key, req.Fingerprint, storekit.CleanRoute(req.Route), req.Now
	if err := idem.CheckKey(key); err != nil {
		return idem.Reservation{}, err
	}
	var reqBytes string // the encoded request, "" for none
	if req.Request != nil {
		b := storekit.EncodeRequest(*req.Request)
		reqBytes = unsafe.String(unsafe.SliceData(b), len(b))
	}
	hash := s.hash(key)
	if err := s.lock(ctx); err != nil {
		return idem.Reservation{}, err
	}
	defer s.mu.Unlock()
	n := now.UnixMicro()
	var (
		i, first        int32
		found, takeover bool
		prev            int64
		attempts        int32
		starts          int32
		created         int64
		oldCost         int64
	)
	for reclaimed := false; ; reclaimed = true {
		i, first, found = s.lookup(hash, key)
		takeover, prev, attempts, starts, created, oldCost = false, 0, 1, 1, n, 0
		claimRoute, claimReq := route, reqBytes
		if found {
			h := s.head(i)
			switch {
			case h.expires == 0 && s.fpIs(i, fingerprint):
				// Released by a failed attempt and retried: the record goes on counting.
				prev, starts, created = h.token, h.starts+1, h.created
			case h.expired(n):
				prev = h.token
			case h.leaseExpired(n) && s.fpIs(i, fingerprint):
				prev, takeover, attempts, starts, created = h.token, true, h.attempts+1, h.starts+1, h.created
				if h.routeLen != 0 {
					claimRoute = s.route(i) // a takeover keeps the claim's route (newBlob copies it)
				}
				if h.reqLen != 0 {
					claimReq = s.request(i) // and its request, as it keeps its route
				}
			default:
				return idem.Reservation{Record: s.record(key, i, fingerprint)}, nil
			}
			oldCost = s.cost(i)
		}
		newCost := int64(len(key)+len(fingerprint)+len(claimRoute)+len(claimReq)) + int64(s.room) + recordOverhead
		if s.fits(!found, newCost-oldCost) {
			route, reqBytes = claimRoute, claimReq
			break
		}
		if reclaimed || !s.reclaim(n) {
			return idem.Reservation{}, s.full(!found)
		}
		// Records were removed and moved: look key up again.
	}
	next := first // a new record goes first in its hash's chain
	if found {
		next = s.head(i).next
		s.bytes -= oldCost
	} else {
		i = s.n
		s.index[hash] = i
		if int(i) == len(s.heads)*pageSize {
			s.heads = append(s.heads, new([pageSize]head))
			s.blobs = append(s.blobs, new([pageSize]string))
		}
		s.n++
	}
	blob, packed := s.newBlob(key, fingerprint, route, reqBytes)
	*s.head(i) = head{
		next:     next,
		keyLen:   int32(len(key)),
		fpLen:    int32(len(blob) - len(key) - len(route) - len(reqBytes)),
		routeLen: uint16(len(route)),
		reqLen:   int32(len(reqBytes)),
		packed:   packed,
		room:     s.room,
		state:    idem.StateInProgress,
		token:    storekit.NextToken(prev, now),
		lease:    now.Add(req.Lease).UnixMicro(),
		expires:  now.Add(req.TTL).UnixMicro(),
		attempts: attempts,
		starts:   starts,
		created:  created,
	}
	*s.blob(i) = blob
	s.bytes += s.cost(i)
	s.expiresAt(s.head(i).expires)
	// The claim's fingerprint is the record's: it need not be unpacked.
	return idem.Reservation{Claimed: true, Takeover: takeover, Record: s.recordAs(key, fingerprint, i)}, nil
}

// newBlob returns key, fingerprint, route and encoded request end to end, in an allocation that
// has s.room bytes more. A fingerprint of 64 lowercase hex digits, as idem.Fingerprint makes, is kept as the 32
// bytes they spell (packed).
func (s *Store) newBlob(key, fingerprint, route, request string) (blob string, packed bool) {
	packed = idem.ValidFingerprint(fingerprint)
	n := len(fingerprint)
	if packed {
		n /= 2
	}
	b := make([]byte, 0, len(key)+n+len(route)+len(request)+int(s.room))
	b = append(b, key...)
	if packed {
		b = appendUnhex(b, fingerprint)
	} else {
		b = append(b, fingerprint...)
	}
	b = append(b, route...)
	b = append(b, request...)
	return unsafe.String(unsafe.SliceData(b), len(b)), packed
}

// appendUnhex appends the bytes that fp, lowercase hex digits, spells.
func appendUnhex(b []byte, fp string) []byte {
	n := len(b)
	b = slices.Grow(b, len(fp)/2)[:n+len(fp)/2]
	out := b[n:]
	for i := range out {
		out[i] = unhex[fp[2*i]]<<4 | unhex[fp[2*i+1]]
	}
	return b
}

// unhex is the value of each lowercase hex digit.
var unhex = [256]byte{'1': 1, '2': 2, '3': 3, '4': 4, '5': 5, '6': 6, '7': 7, '8': 8, '9': 9,
	'a': 10, 'b': 11, 'c': 12, 'd': 13, 'e': 14, 'f': 15}

// fpBytes returns record i's fingerprint as it is kept.
func (s *Store) fpBytes(i int32) string {
	h := s.head(i)
	return (*s.blob(i))[h.keyLen : h.keyLen+h.fpLen]
}

// route returns record i's route, a window on its blob.
func (s *Store) route(i int32) string {
	h := s.head(i)
	end := h.keyLen + h.fpLen
	return (*s.blob(i))[end : end+int32(h.routeLen)]
}

// request returns record i's encoded request, a window on its blob ("" for none).
func (s *Store) request(i int32) string {
	h := s.head(i)
	end := h.keyLen + h.fpLen + int32(h.routeLen)
	return (*s.blob(i))[end : end+h.reqLen]
}

// respStart returns where record i's encoded response begins in its blob.
func (h *head) respStart() int { return int(h.keyLen+h.fpLen) + int(h.routeLen) + int(h.reqLen) }

// fp returns record i's fingerprint: a new string if it is packed, else a window on its blob.
func (s *Store) fp(i int32) string {
	if s.head(i).packed {
		return hex.EncodeToString([]byte(s.fpBytes(i)))
	}
	return s.fpBytes(i)
}

// fpIs reports whether record i's fingerprint is fingerprint, without allocating.
func (s *Store) fpIs(i int32, fingerprint string) bool {
	if !s.head(i).packed {
		return s.fpBytes(i) == fingerprint
	}
	if !idem.ValidFingerprint(fingerprint) {
		return false
	}
	var buf [idem.FingerprintLen / 2]byte
	return s.fpBytes(i) == string(appendUnhex(buf[:0], fingerprint))
}

// held returns the position of key's record if it is in progress with token.
func (s *Store) held(key string, token int64) (int32, error) {
	i, ok := s.find(key)
	if !ok {
		return 0, idem.ErrLeaseLost
	}
	if h := s.head(i); h.state != idem.StateInProgress || h.token != token || h.expires == 0 {
		return 0, idem.ErrLeaseLost
	}
	return i, nil
}

// Complete implements idem.Store.
func (s *Store) Complete(ctx context.Context, key string, token int64, resp idem.Response, now, expiresAt time.Time) error {
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	i, err := s.held(key, token)
	if err != nil {
		return err
	}
	h := s.head(i)
	s.bytes -= s.cost(i)
	h.state = idem.StateCompleted
	h.done = now.UnixMicro()
	h.expires = expiresAt.UnixMicro()
	s.expiresAt(h.expires)
	// The key and the fingerprint, then the encoded response, in the room the claim's blob
	// was given if the response fits: no allocation. The room lies past the blob's end, so
	// no string holds those bytes, and Complete writes it once: it is then used up. A response
	// that does not fit is written to a new allocation, after a copy of the blob.
	blob := *s.blob(i)
	b := unsafe.Slice(unsafe.StringData(blob), len(blob)+int(h.room))[:len(blob)]
	b = storekit.AppendResponse(b, resp)
	if enc := len(b) - len(blob); h.room-int32(enc) > int32(len(b)/8) {
		// Much more room than this response needed: keep only what it takes.
		b = slices.Clone(b)
	}
	*s.blob(i) = unsafe.String(unsafe.SliceData(b), len(b))
	h.room = 0
	s.room = int32(min(len(b)-len(blob), maxRoom))
	s.bytes += s.cost(i)
	return nil
}

// Release implements idem.Store.
func (s *Store) Release(ctx context.Context, key string, token int64) error {
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	i, err := s.held(key, token)
	if err != nil {
		return err
	}
	// Keep the record, expired, so the next claim's token is larger than this one.
	s.head(i).expires, s.head(i).lease = 0, 0
	s.expiresAt(0)
	return nil
}

// Extend implements idem.Store.
func (s *Store) Extend(ctx context.Context, key string, token int64, until time.Time) error {
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	i, err := s.held(key, token)
	if err != nil {
		return err
	}
	h := s.head(i)
	h.lease = until.UnixMicro()
	h.expires = max(h.expires, h.lease)
	return nil
}

// Get implements idem.Store.
func (s *Store) Get(ctx context.Context, key string) (idem.Record, error) {
	if err := s.lock(ctx); err != nil {
		return idem.Record{}, err
	}
	defer s.mu.Unlock()
	i, ok := s.find(key)
	if !ok {
		return idem.Record{}, idem.ErrNotFound
	}
	return s.record(key, i, ""), nil
}

// Delete removes key's record whatever its state (idem.Deleter).
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	if i, ok := s.find(key); ok {
		s.remove(i)
	}
	return nil
}

// Sweep implements idem.Store.
func (s *Store) Sweep(ctx context.Context, now time.Time, batch int) (int, error) {
	if err := s.lock(ctx); err != nil {
		return 0, err
	}
	defer s.mu.Unlock()
	n, at := 0, now.UnixMicro()
	// From the end: remove moves the last record, already seen, into the hole.
	for i := s.n - 1; i >= 0 && n < batch; i-- {
		if s.head(i).expired(at) {
			s.remove(i)
			n++
		}
	}
	return n, nil
}

// remove deletes record i, moving the last record into its place so the arrays stay dense,
// and gives memory back once they are mostly empty.
func (s *Store) remove(i int32) {
	s.bytes -= s.cost(i)
	s.link(s.hash(s.key(i)), i, s.head(i).next)
	last := s.n - 1
	if i != last {
		s.link(s.hash(s.key(last)), last, i)
		*s.head(i), *s.blob(i) = *s.head(last), *s.blob(last)
	}
	*s.blob(last) = ""
	s.n = last
	// Keep one empty page, so that a store at a page's edge does not allocate a page for each
	// record added after one removed.
	if p := len(s.heads); p >= 2 && int(s.n) <= (p-2)*pageSize {
		s.heads[p-1], s.blobs[p-1] = nil, nil
		s.heads, s.blobs = s.heads[:p-1], s.blobs[:p-1]
	}
}

// record returns record i as an idem.Record, with its own copy of the response: callers may
// keep or change it. fingerprint is the caller's, "" if it has none: the record's, if it is
// the same, is not unpacked.
func (s *Store) record(key string, i int32, fingerprint string) idem.Record {
	fp := fingerprint
	if fp == "" || !s.fpIs(i, fingerprint) {
		fp = s.fp(i)
	}
	return s.recordAs(key, fp, i)
}

// recordAs is record with the record's fingerprint, fp, known.
func (s *Store) recordAs(key, fp string, i int32) idem.Record {
	h := s.head(i)
	r := idem.Record{
		Key:         key,
		Fingerprint: fp,
		State:       h.state,
		Token:       h.token,
		LeaseUntil:  time.UnixMicro(h.lease),
		Attempts:    int(h.attempts),
		Starts:      int(h.starts),
		CreatedAt:   time.UnixMicro(h.created),
		ExpiresAt:   time.UnixMicro(h.expires),
	}
	if h.routeLen != 0 {
		r.Route = strings.Clone(s.route(i)) // not a window on the blob, which holds the body
	}
	if h.reqLen != 0 {
		// The bytes were written by EncodeRequest, so they always decode; the decoder copies.
		req, _ := storekit.DecodeRequest([]byte(s.request(i)))
		r.Request = &req
	}
	if h.done != 0 {
		r.CompletedAt = time.UnixMicro(h.done)
	}
	if end := h.respStart(); len(*s.blob(i)) > end {
		// The bytes were written by EncodeResponse, so they always decode.
		resp, _ := storekit.DecodeResponse([]byte((*s.blob(i))[end:]))
		r.Response = &resp
	}
	return r
}

// ownFP returns record i's fingerprint in a string of its own, not a window on its blob.
func (s *Store) ownFP(i int32) string {
	if s.head(i).packed {
		return s.fp(i)
	}
	return strings.Clone(s.fpBytes(i))
}

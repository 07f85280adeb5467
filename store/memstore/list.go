package memstore

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/storekit"
)

var _ idem.Lister = (*Store)(nil)

// List returns a page of the store's records in key order or newest first (idem.Lister), for
// operators. It scans every record under the store's lock, keeping the Limit+1 first matching
// records in the listing's order, so a call costs a pass over the store and holds the lock
// for it: fine for tests and small stores, which is what memstore is for.
func (s *Store) List(ctx context.Context, q idem.ListQuery) (idem.ListPage, error) {
	b, err := storekit.Bounds(q)
	if err != nil {
		return idem.ListPage{}, err
	}
	if err := s.lock(ctx); err != nil {
		return idem.ListPage{}, err
	}
	defer s.mu.Unlock()
	// The best Limit+1 records so far, in the listing's order: a bounded insertion, never the
	// whole store sorted or copied.
	best := make([]idem.Record, 0, b.Limit+1)
	for i := range s.n {
		h, k := s.head(i), s.key(i)
		if !b.Match(k, h.state, h.created) {
			continue
		}
		if len(best) == b.Limit+1 && !b.Before(k, h.created, best[b.Limit].Key, best[b.Limit].CreatedAt.UnixMicro()) {
			continue
		}
		if b.Route != "" && s.route(i) != b.Route {
			continue
		}
		r := s.light(i)
		if !b.MatchRecord(&r) {
			continue
		}
		at, _ := slices.BinarySearchFunc(best, r, func(x, r idem.Record) int {
			switch {
			case b.Before(x.Key, x.CreatedAt.UnixMicro(), r.Key, r.CreatedAt.UnixMicro()):
				return -1
			case x.Key == r.Key:
				return 0
			}
			return 1
		})
		if len(best) == b.Limit+1 {
			best = best[:b.Limit]
		}
		best = slices.Insert(best, at, r)
	}
	return b.Page(best), nil
}

// light returns record i without its response's headers and body.
func (s *Store) light(i int32) idem.Record {
	h := s.head(i)
	r := idem.Record{
		Key:         strings.Clone(s.key(i)), // not a window on the blob, which holds the body
		Fingerprint: s.ownFP(i),
		State:       h.state,
		Token:       h.token,
		LeaseUntil:  time.UnixMicro(h.lease),
		Attempts:    int(h.attempts),
		Starts:      int(h.starts),
		CreatedAt:   time.UnixMicro(h.created),
		ExpiresAt:   time.UnixMicro(h.expires),
		Route:       strings.Clone(s.route(i)),
	}
	if h.done != 0 {
		r.CompletedAt = time.UnixMicro(h.done)
	}
	if end := h.respStart(); len(*s.blob(i)) > end {
		// The bytes were written by EncodeResponse, so they always decode.
		resp, _ := storekit.DecodeResponseHead([]byte((*s.blob(i))[end:min(len(*s.blob(i)), end+storekit.ListResponseHeadLen)]))
		r.Response = &resp
	}
	return r
}

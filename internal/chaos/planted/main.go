// Command planted is the idem CLI with deliberately broken stores, for the chaos harness to
// show that its verdict catches each bug it exists to catch. A planted scheme wraps a real
// store (postgres, redis) and removes one of its guarantees in the real store's own path:
//
//   - nofence-complete+<scheme>: Complete is not fenced. It reads the record's current token
//     and completes with that, which is the real store's statement with its "token = $2"
//     condition removed: a holder whose claim was taken over completes its successor's record.
//   - nofence-extend+<scheme>: Extend is not fenced, in the same way: a holder whose claim was
//     taken over extends its successor's lease and is told its own still holds, so an effect
//     whose claim landed late starts although another holder runs it.
//   - nofence+<scheme>: both.
//   - noscope+<scheme>: keys lose their scope (everything up to the first scope separator), so
//     tenants that use the same key share one record.
//   - nodrain+<scheme>: no lease is extended past one lease (the command's --lease) from now.
//     A heartbeat's extensions are unchanged, but the floor a draining gateway puts under the
//     claims of the upstream calls it cuts (their deadline and a lease after it) is gone: the
//     claim lapses a lease after the gateway exits, while the cut call may still act.
//
// It is never built into the product.
package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/internal/cli"
	"github.com/idemkit/idem/store/storeurl"
)

// bugs are the planted schemes' prefixes and what each removes.
var bugs = map[string]bug{
	"nofence-complete": {complete: true},
	"nofence-extend":   {extend: true},
	"nofence":          {complete: true, extend: true},
	"noscope":          {scope: true},
	"nodrain":          {drain: true},
}

// bug says which guarantees a planted store removes.
type bug struct{ complete, extend, scope, drain bool }

// lease is the command's --lease (the gateway's default when absent), for nodrain.
func lease(args []string) time.Duration {
	d := 30 * time.Second
	for i, a := range args {
		v, ok := strings.CutPrefix(strings.TrimLeft(a, "-"), "lease=")
		if !ok && strings.TrimLeft(a, "-") == "lease" && i+1 < len(args) {
			v, ok = args[i+1], true
		}
		if ok {
			if p, err := time.ParseDuration(v); err == nil {
				d = p
			}
		}
	}
	return d
}

func main() {
	for prefix, b := range bugs {
		for _, scheme := range []string{"postgres", "redis"} {
			storeurl.Register(prefix+"+"+scheme, opener(prefix, b))
		}
	}
	os.Exit(cli.Main(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

func opener(prefix string, b bug) storeurl.Opener {
	return func(ctx context.Context, u *url.URL) (storeurl.Store, error) {
		inner := *u
		inner.Scheme = strings.TrimPrefix(u.Scheme, prefix+"+")
		st, err := storeurl.Open(ctx, inner.String())
		if err != nil {
			return nil, fmt.Errorf("planted %s: %w", prefix, err)
		}
		return plantedStore{Store: st, bug: b, lease: lease(os.Args[1:])}, nil
	}
}

// plantedStore is a real store with one bug planted.
type plantedStore struct {
	storeurl.Store
	bug   bug
	lease time.Duration
}

// key drops the scope of a storage key when the scope bug is planted.
func (s plantedStore) key(key string) string {
	if s.bug.scope {
		if i := strings.IndexByte(key, idemhttp.ScopeSeparator); i >= 0 {
			return key[i+1:]
		}
	}
	return key
}

// currentToken returns the record's current token in place of token: the fence removed.
func (s plantedStore) currentToken(ctx context.Context, key string, token int64) int64 {
	if rec, err := s.Store.Get(ctx, key); err == nil {
		return rec.Token
	}
	return token
}

func (s plantedStore) Reserve(ctx context.Context, req idem.ReserveRequest) (idem.Reservation, error) {
	req.Key = s.key(req.Key)
	return s.Store.Reserve(ctx, req)
}

func (s plantedStore) Complete(ctx context.Context, key string, token int64, resp idem.Response, now, expiresAt time.Time) error {
	key = s.key(key)
	if s.bug.complete {
		token = s.currentToken(ctx, key, token)
	}
	return s.Store.Complete(ctx, key, token, resp, now, expiresAt)
}

func (s plantedStore) Extend(ctx context.Context, key string, token int64, until time.Time) error {
	key = s.key(key)
	if s.bug.extend {
		token = s.currentToken(ctx, key, token)
	}
	if limit := time.Now().Add(s.lease); s.bug.drain && until.After(limit) {
		until = limit
	}
	return s.Store.Extend(ctx, key, token, until)
}

func (s plantedStore) Release(ctx context.Context, key string, token int64) error {
	return s.Store.Release(ctx, s.key(key), token)
}

func (s plantedStore) Get(ctx context.Context, key string) (idem.Record, error) {
	return s.Store.Get(ctx, s.key(key))
}

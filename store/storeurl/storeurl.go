// Package storeurl opens an idem store from a URL, so programs such as the idem gateway choose
// their backend by configuration.
//
// # Schemes
//
//	memory://                                     memstore (one process, nothing persisted;
//	                                              params: max_records, max_bytes)
//	sqlite://./idem.db   sqlite:///var/idem.db    sqlitestore: a file, the embedded default
//	postgres://user@host:5432/db?sslmode=disable  pgstore (params: table, schema, migrate, group_commit,
//	                                              partition_width, partition_margin)
//	mysql://user:pass@host:3306/db                mysqlstore (params: table, migrate)
//	redis://host:6379/0   rediss://…              redisstore (params: prefix, autopipeline)
//	redis+cluster://h1:7001,h2:7002,h3:7003       redisstore on a Redis Cluster (same params)
//	dynamodb://TABLE?region=eu-west-1             dynamostore (params: endpoint, region,
//	                                              prefix, create=true to create the table)
//
// A memory:// store holds at most MemoryMaxRecords records taking MemoryMaxBytes bytes unless
// max_records or max_bytes say otherwise (0: no bound); past either, a new key is refused with
// an error matching idem.ErrStoreUnavailable until records expire (memstore.NewBounded).
//
// SQL schemas are migrated on open unless migrate=false. PostgreSQL stores group concurrent
// claims and completions into shared transactions (pgstore.Options.GroupCommit, here
// PostgresGroupCommit of them at once) unless group_commit=0; group_commit=N sets how many.
// partition_width=6h selects pgstore's partitioned layout (pgstore.Options.PartitionWidth),
// whose Sweep drops whole expired partitions; partition_margin sets
// pgstore.Options.PartitionMargin. The drivers' own parameters
// (sslmode, pool_max_conns, dial_timeout, parseTime…) pass through to them.
//
// Query parameters tune a backend (see each scheme's Open); unknown parameters are an error,
// so a typo does not silently fall back to a default.
package storeurl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"sort"
	"strings"
	"sync"

	"github.com/idemkit/idem"
)

// Store is an idem.Store that must be closed after use.
type Store interface {
	idem.Store
	io.Closer
}

// Migrator is implemented by stores whose schema is migrated explicitly (SQL backends).
type Migrator interface {
	Migrate(ctx context.Context) error
}

// ErrUnknownScheme: no backend is registered for the URL's scheme.
var ErrUnknownScheme = errors.New("storeurl: unknown scheme")

// Opener opens a store from a parsed URL.
type Opener func(ctx context.Context, u *url.URL) (Store, error)

var (
	mu      sync.RWMutex
	openers = map[string]Opener{}
)

// Register makes scheme open with fn. Backends register in this package's init; programs may
// register their own schemes.
func Register(scheme string, fn Opener) {
	mu.Lock()
	defer mu.Unlock()
	openers[strings.ToLower(scheme)] = fn
}

// Schemes lists the registered schemes, sorted.
func Schemes() []string {
	mu.RLock()
	defer mu.RUnlock()
	out := make([]string, 0, len(openers))
	for s := range openers {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

// Open parses raw and opens the store it names. Credentials in raw never appear in errors.
func Open(ctx context.Context, raw string) (Store, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("storeurl: %w: cannot parse the store URL", idem.ErrInvalidInput)
	}
	mu.RLock()
	fn, ok := openers[strings.ToLower(u.Scheme)]
	mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("%w %q in %s (known: %s)", ErrUnknownScheme, u.Scheme, u.Redacted(), strings.Join(Schemes(), ", "))
	}
	st, err := fn(ctx, u)
	if err != nil {
		return nil, fmt.Errorf("storeurl: open %s: %w", u.Redacted(), err)
	}
	return st, nil
}

// params reads query parameters, refusing any that are not known.
type params struct {
	q    url.Values
	used map[string]bool
}

func newParams(u *url.URL) *params { return &params{q: u.Query(), used: map[string]bool{}} }

func (p *params) get(name string) string {
	p.used[name] = true
	return p.q.Get(name)
}

// done fails if the URL carries a parameter nobody read.
func (p *params) done() error {
	for k := range p.q {
		if !p.used[k] {
			return fmt.Errorf("%w: unknown parameter %q", idem.ErrInvalidInput, k)
		}
	}
	return nil
}

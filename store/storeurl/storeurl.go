// Package storeurl opens an idem store from a URL, so programs such as the idem gateway choose
// their backend by configuration.
//
// # Schemes
//
//	memory://                                     memstore (one process, nothing persisted;
//	                                              params: max_records, max_bytes)
//	sqlite://./idem.db   sqlite:///var/idem.db    sqlitestore: a file, the embedded default
//	                                              (params: table, migrate, busy_timeout, synchronous)
//	postgres://user@host:5432/db?sslmode=disable  pgstore (params: table, schema, migrate, group_commit,
//	postgresql://…                                partition_width, partition_margin)
//	mysql://user:pass@host:3306/db                mysqlstore (params: table, migrate)
//	redis://host:6379/0   rediss://…              redisstore (params: prefix, autopipeline)
//	redis+cluster://h1:7001,h2:7002,h3:7003       redisstore on a Redis Cluster (same params;
//	rediss+cluster://…                            rediss+cluster over TLS)
//	dynamodb://TABLE?region=eu-west-1             dynamostore (params: endpoint, region,
//	                                              prefix, create=true to create the table)
//
// A memory:// store holds at most MemoryMaxRecords records taking MemoryMaxBytes bytes unless
// max_records or max_bytes say otherwise (0: no bound); past either, a new key is refused with
// an error matching idem.ErrStoreUnavailable until records expire (memstore.NewBounded).
//
// SQL schemas are migrated on open unless migrate=false, which opens an existing table only
// (for sqlite://, an existing file): when it is missing, Open fails with an error wrapping
// ErrNoTable. OpenExisting opens that way whatever the URL says, and Migrate migrates and
// reports what it did. PostgreSQL stores group concurrent
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
	"github.com/idemkit/idem/store/dynamostore"
	"github.com/idemkit/idem/store/sqlitestore"
	"github.com/idemkit/idem/store/sqlmigrate"
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

// ErrNoTable is returned (wrapped) by OpenExisting, and by Open with migrate=false, when the
// store's table does not exist: it names where it looked. It is sqlmigrate.ErrNoTable.
var ErrNoTable = sqlmigrate.ErrNoTable

// ErrNoSchema is returned by Migrate for a store without a schema to migrate (memory://,
// redis://): its keys need nothing created before use.
var ErrNoSchema = errors.New("storeurl: this store has no schema to migrate")

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
	u, scheme, err := parse(raw)
	if err != nil {
		return nil, err
	}
	mu.RLock()
	fn, ok := openers[scheme]
	mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("%w %q in %s (known: %s)", ErrUnknownScheme, u.Scheme, u.Redacted(), strings.Join(Schemes(), ", "))
	}
	st, err := fn(ctx, u)
	if err != nil {
		return nil, openError(u, err)
	}
	return st, nil
}

// openError wraps err, an opener's error for u, naming u unless err already does.
func openError(u *url.URL, err error) error {
	if errors.Is(err, ErrNoTable) {
		return fmt.Errorf("storeurl: %w", err)
	}
	return fmt.Errorf("storeurl: open %s: %w", u.Redacted(), err)
}

// parse parses raw and returns its lower-case scheme.
func parse(raw string) (*url.URL, string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, "", fmt.Errorf("storeurl: %w: cannot parse the store URL", idem.ErrInvalidInput)
	}
	return u, strings.ToLower(u.Scheme), nil
}

// OpenExisting opens the store raw names, as Open does, for tools that read or repair records
// and must create nothing: SQL schemas are neither created nor migrated (whatever the URL's
// migrate says) and a DynamoDB table is not created (whatever its create says). When the
// table (or SQLite file) does not exist it fails with an error wrapping ErrNoTable that names
// where it looked, so a mistyped table, schema or path is reported as such instead of
// reading as an empty store. memory:// and redis:// have no table: they open as with Open.
func OpenExisting(ctx context.Context, raw string) (Store, error) {
	u, scheme, err := parse(raw)
	if err != nil {
		return nil, err
	}
	var st Store
	switch scheme {
	case "sqlite":
		st, err = nilStore(openSQLiteMode(ctx, u, modeExisting))
	case "postgres", "postgresql":
		st, err = nilStore(openPostgresMode(ctx, u, modeExisting))
	case "mysql":
		st, err = nilStore(openMySQLMode(ctx, u, modeExisting))
	case "dynamodb":
		st, err = nilStore(openDynamoDBMode(ctx, u, modeExisting))
	default:
		return Open(ctx, raw)
	}
	if err != nil {
		return nil, openError(u, err)
	}
	return st, nil
}

// nilStore returns st as a Store, nil (not a typed nil) on error.
func nilStore[S Store](st S, err error) (Store, error) {
	if err != nil {
		return nil, err
	}
	return st, nil
}

// Migrate creates or upgrades the schema of the store raw names and says what it did: the
// table's schema version before (0: it was created) and after. A DynamoDB table is created if
// it does not exist (as create=true does), and its indexes are added if it lacks them: it
// counts as version DynamoDBVersion with both (dynamostore.ListIndex and NewestIndex), and 1
// without. memory:// and redis:// have no schema: Migrate fails with ErrNoSchema, having
// changed nothing.
func Migrate(ctx context.Context, raw string) (sqlmigrate.Result, error) {
	u, scheme, err := parse(raw)
	if err != nil {
		return sqlmigrate.Result{}, err
	}
	res, err := migrate(ctx, u, scheme)
	if err != nil {
		return res, openError(u, err)
	}
	return res, nil
}

func migrate(ctx context.Context, u *url.URL, scheme string) (sqlmigrate.Result, error) {
	switch scheme {
	case "sqlite":
		path, opt, err := sqliteOptions(u)
		if err != nil {
			return sqlmigrate.Result{}, err
		}
		return sqlitestore.MigrateVersions(ctx, path, opt)
	case "postgres", "postgresql":
		st, err := openPostgresMode(ctx, u, modeDefer)
		if err != nil {
			return sqlmigrate.Result{}, err
		}
		defer st.Close()
		return st.MigrateVersions(ctx)
	case "mysql":
		st, err := openMySQLMode(ctx, u, modeDefer)
		if err != nil {
			return sqlmigrate.Result{}, err
		}
		defer st.Close()
		return st.MigrateVersions(ctx)
	case "dynamodb":
		st, err := openDynamoDBMode(ctx, u, modeDefer)
		if err != nil {
			return sqlmigrate.Result{}, err
		}
		defer st.Close()
		from, err := dynamoTableVersion(ctx, st)
		if err != nil {
			return sqlmigrate.Result{}, err
		}
		if err := st.CreateTable(ctx, dynamostore.TableOptions{}); err != nil {
			return sqlmigrate.Result{}, err
		}
		return sqlmigrate.Result{From: from, To: DynamoDBVersion}, nil
	}
	mu.RLock()
	_, known := openers[scheme]
	mu.RUnlock()
	if !known {
		return sqlmigrate.Result{}, fmt.Errorf("%w %q in %s (known: %s)", ErrUnknownScheme, u.Scheme, u.Redacted(), strings.Join(Schemes(), ", "))
	}
	return sqlmigrate.Result{}, ErrNoSchema
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

package storeurl

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/memstore"
	"github.com/idemkit/idem/store/sqlitestore"
)

func init() {
	Register("memory", openMemory)
	Register("sqlite", openSQLite)
}

// Bounds of a memory:// store unless its URL sets them: a process serving outside callers
// must not let them fill its memory.
const (
	MemoryMaxRecords = 100_000
	MemoryMaxBytes   = 64 << 20
)

// openMemory opens memory://, a memstore bounded to MemoryMaxRecords records and
// MemoryMaxBytes bytes (memstore.NewBounded); past either, new claims fail with an error
// matching idem.ErrStoreUnavailable until records expire. Parameters: max_records and
// max_bytes (a count of bytes, or with a unit: 512KiB, 64MiB, 1GiB, 100MB), 0 for no bound.
func openMemory(_ context.Context, u *url.URL) (Store, error) {
	p := newParams(u)
	opt := memstore.Options{MaxRecords: MemoryMaxRecords, MaxBytes: MemoryMaxBytes}
	if v := p.get("max_records"); v != "" {
		n, err := strconv.ParseInt(v, 10, 32)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("%w: max_records %q is not a count of records (0: no bound)", idem.ErrInvalidInput, v)
		}
		opt.MaxRecords = int(n)
	}
	if v := p.get("max_bytes"); v != "" {
		n, err := parseBytes(v)
		if err != nil {
			return nil, fmt.Errorf("%w: max_bytes %q is not a size (like 67108864 or 64MiB; 0: no bound)", idem.ErrInvalidInput, v)
		}
		opt.MaxBytes = n
	}
	if err := p.done(); err != nil {
		return nil, err
	}
	return memstore.NewBounded(opt)
}

// parseBytes reads a count of bytes, bare or with a unit (KiB, MiB, GiB are powers of 1024;
// kB, KB, MB, GB of 1000).
func parseBytes(s string) (int64, error) {
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"kB", 1000}, {"KB", 1000}, {"MB", 1000 * 1000}, {"GB", 1000 * 1000 * 1000}, {"B", 1}} {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSuffix(s, u.suffix), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil || n < 0 || n > (1<<50)/mult {
		return 0, errors.New("not a size")
	}
	return n * mult, nil
}

// openSQLite opens sqlite://PATH. sqlite://./idem.db and sqlite://idem.db are relative to the
// working directory, sqlite:///var/lib/idem.db is absolute. Parameters: table, busy_timeout
// (a Go duration), synchronous (NORMAL or FULL), migrate (default true; false opens an
// existing file and table only, creating nothing).
func openSQLite(ctx context.Context, u *url.URL) (Store, error) {
	return nilStore(openSQLiteMode(ctx, u, modeParam))
}

func openSQLiteMode(ctx context.Context, u *url.URL, mode openMode) (*sqlitestore.Store, error) {
	path, opt, err := sqliteOptions(u)
	if err != nil {
		return nil, err
	}
	if mode == modeExisting {
		opt.NoMigrate = true
	}
	st, err := sqlitestore.Open(ctx, path, opt)
	if errors.Is(err, ErrNoTable) {
		return nil, fmt.Errorf("%w at %s (%v)", ErrNoTable, u.Redacted(), err)
	}
	return st, err
}

// sqliteOptions reads the path and the options of a sqlite:// URL.
func sqliteOptions(u *url.URL) (string, sqlitestore.Options, error) {
	path := u.Host + u.Path
	if u.Opaque != "" {
		path = u.Opaque
	}
	path = strings.TrimPrefix(path, "//")
	var opt sqlitestore.Options
	if path == "" {
		return "", opt, fmt.Errorf("%w: sqlite URL has no path (try sqlite://./idem.db)", idem.ErrInvalidInput)
	}
	p := newParams(u)
	opt = sqlitestore.Options{Table: p.get("table"), Synchronous: p.get("synchronous")}
	if v := p.get("busy_timeout"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return "", opt, fmt.Errorf("%w: busy_timeout %q: %v", idem.ErrInvalidInput, v, err)
		}
		opt.BusyTimeout = d
	}
	mig, err := migrateFlag(map[string]string{"migrate": p.get("migrate")})
	if err != nil {
		return "", opt, err
	}
	opt.NoMigrate = !mig
	if err := p.done(); err != nil {
		return "", opt, err
	}
	return path, opt, nil
}

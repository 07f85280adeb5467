package sqlitestore

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/internal/storeerr"
	"github.com/idemkit/idem/store/internal/txmode"
	"github.com/idemkit/idem/store/sqlmigrate"
	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver
)

var (
	_ idem.Store   = (*Store)(nil)
	_ idem.Deleter = (*Store)(nil)
)

// DefaultTable is the records table used when Options.Table is empty.
const DefaultTable = "idem_records"

// Options configure a Store. The zero value is a good default for every field.
type Options struct {
	// Table names the records table. Default DefaultTable ("idem_records"). It must be 1 to 48
	// (sqlmigrate.MaxNameLen) ASCII letters, digits and underscores, not starting with a digit or "sqlite_", and not
	// "idem_migrations". Case does not matter to SQLite. Stores with different tables may share
	// one file; each table has its own schema version.
	Table string
	// BusyTimeout is how long a statement waits for a lock held by another process (or, on
	// open, for another process's migration) before it fails. Default 5s.
	BusyTimeout time.Duration
	// Readers is how many read connections serve Get and the read-only first look of Reserve
	// (WAL lets them read while the writer writes). Default max(4, GOMAXPROCS).
	Readers int
	// KnownKeys is the size of a table of key hashes (8 bytes each) by which Reserve, DoTx and
	// TxRunner remember which keys they have seen existing: for those they first look without
	// the write lock (fast replays); for others they claim first (fast new keys), unless most
	// of those turned out to exist of late, as after a restart. Default 65536; negative
	// disables it, and every call then looks first. It never affects correctness, only speed.
	KnownKeys int
	// Synchronous is SQLite's synchronous setting for the writer: "NORMAL" (default) or "FULL".
	// With NORMAL in WAL mode a commit survives a crash of the process but the last commits
	// may be lost if the machine loses power, so a completed effect could then run again;
	// FULL syncs every commit to disk and costs write throughput.
	Synchronous string
	// TxTTL is how long a response stored by DoTx or a TxRunner is replayed. Default 24h.
	TxTTL time.Duration
	// Now is the clock of DoTx and TxRunner (the engine passes its own times to the other
	// methods). Default time.Now.
	Now func() time.Time
	// NoMigrate opens an existing store only, for tools that must not create one: the file
	// is not created and its schema not migrated. Open then fails with an error wrapping
	// sqlmigrate.ErrNoTable when the file or the table does not exist, and with an error
	// naming the versions when the table's schema is older than SchemaVersion.
	NoMigrate bool
}

// withDefaults returns o with defaults filled in, or an error naming the bad field.
func (o Options) withDefaults() (Options, error) {
	o.Table = cmp.Or(o.Table, DefaultTable)
	o.BusyTimeout = cmp.Or(o.BusyTimeout, 5*time.Second)
	o.Readers = cmp.Or(o.Readers, max(4, runtime.GOMAXPROCS(0)))
	o.KnownKeys = cmp.Or(o.KnownKeys, 1<<16)
	o.Synchronous = strings.ToUpper(cmp.Or(o.Synchronous, "NORMAL"))
	o.TxTTL, o.Now = txmode.Defaults(o.TxTTL, o.Now)
	switch {
	case !validTable(o.Table):
		return o, storeerr.Option("sqlitestore", "Options.Table", "%q is not a valid table name (1 to 48 letters, digits and underscores, not starting with a digit or sqlite_)", o.Table)
	case strings.EqualFold(o.Table, migrationsTable):
		return o, storeerr.Option("sqlitestore", "Options.Table", "%q is the name of the migrations table", o.Table)
	case o.BusyTimeout < time.Millisecond:
		return o, storeerr.Option("sqlitestore", "Options.BusyTimeout", "%s is below 1ms", o.BusyTimeout)
	case o.Readers < 1:
		return o, storeerr.Option("sqlitestore", "Options.Readers", "%d is below 1", o.Readers)
	case o.Synchronous != "NORMAL" && o.Synchronous != "FULL":
		return o, storeerr.Option("sqlitestore", "Options.Synchronous", "%q is neither NORMAL nor FULL", o.Synchronous)
	case o.TxTTL < time.Millisecond:
		return o, storeerr.Option("sqlitestore", "Options.TxTTL", "%s is below 1ms", o.TxTTL)
	}
	return o, nil
}

// validTable: the rule every SQL store follows (sqlmigrate.ValidName), and not a name SQLite
// reserves for itself.
func validTable(s string) bool {
	return sqlmigrate.ValidName(s) && !strings.HasPrefix(strings.ToLower(s), "sqlite_")
}

func invalid(format string, args ...any) error {
	return storeerr.Invalid("sqlitestore", format, args...)
}

// Store is an idem.Store in one SQLite file. It is safe for concurrent use by many goroutines
// and by several processes sharing the file. Create it with Open; release it with Close.
//
// Writes go through one writer connection (SQLite admits one writer at a time, and one
// connection queues them in Go instead of in busy-wait loops); reads go through a pool of
// Options.Readers connections.
type Store struct {
	path   string
	table  string
	opt    Options
	w, r   *sql.DB
	closed atomic.Bool
	known  *hint // nil when Options.KnownKeys is negative

	migrated sqlmigrate.Result // what Open's migration did

	get      *sql.Stmt // on r: the record of a key
	wget     *sql.Stmt // on w: the same, inside the writer's transaction
	upsert   *sql.Stmt // on w: the claim
	complete *sql.Stmt
	release  *sql.Stmt
	extend   *sql.Stmt
	del      *sql.Stmt
	sweep    *sql.Stmt
}

// Open opens (creating if needed) the SQLite database file at path, puts it in WAL mode and
// brings its schema up to SchemaVersion. Two processes may open the same file at once: the
// migration runs in one write transaction and each step is applied once.
//
// path is a file system path (not ":memory:": the store needs one file shared by its
// connections). Open fails with an error naming path if the file cannot be opened or is not
// a SQLite database, and with an error wrapping idem.ErrInvalidInput, naming the field, for
// bad Options. ctx bounds the opening and the migration.
func Open(ctx context.Context, path string, opts Options) (*Store, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if path == "" {
		return nil, invalid("path is empty")
	}
	if path == ":memory:" || strings.HasPrefix(path, "file:") {
		return nil, invalid("path %q is not a file system path", path)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: open %s: %w", path, err)
	}
	if fi, err := os.Stat(filepath.Dir(abs)); err != nil {
		return nil, fmt.Errorf("sqlitestore: open %s: %w", path, err)
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("sqlitestore: open %s: %s is not a directory", path, filepath.Dir(abs))
	}
	if fi, err := os.Stat(abs); err == nil && fi.IsDir() {
		return nil, fmt.Errorf("sqlitestore: open %s: is a directory", path)
	} else if errors.Is(err, os.ErrNotExist) && o.NoMigrate {
		return nil, fmt.Errorf("sqlitestore: open %s: %w %q: the file does not exist", path, sqlmigrate.ErrNoTable, o.Table)
	}
	// SQLite answers some lock conflicts at once with SQLITE_BUSY instead of waiting out the
	// busy timeout (switching a fresh file to WAL while another opener holds it, say), so an
	// open that meets another process's open is retried, within BusyTimeout.
	deadline := time.Now().Add(o.BusyTimeout)
	for pause := 5 * time.Millisecond; ; pause = min(2*pause, 200*time.Millisecond) {
		s := &Store{path: abs, table: o.Table, opt: o, known: newHint(o.KnownKeys)}
		err := s.open(ctx, o)
		if err == nil {
			return s, nil
		}
		s.closeAll()
		if !isBusy(err) || ctx.Err() != nil || time.Now().Add(pause).After(deadline) {
			return nil, fmt.Errorf("sqlitestore: open %s: %w", path, err)
		}
		time.Sleep(pause)
	}
}

// isBusy reports whether err is SQLite's "database is locked" (SQLITE_BUSY).
func isBusy(err error) bool {
	var se interface{ Code() int }
	if errors.As(err, &se) && se.Code()&0xff == 5 {
		return true
	}
	return strings.Contains(err.Error(), "SQLITE_BUSY")
}

// Migrate brings the schema of the file at path up to SchemaVersion, as Open does, and closes
// it again. Calling it is optional, since Open migrates too.
func Migrate(ctx context.Context, path string, opts Options) error {
	_, err := MigrateVersions(ctx, path, opts)
	return err
}

// MigrateVersions is Migrate, returning the table's schema version before and after (From 0:
// the table was created; From equal to To: it was up to date). It is what `idem migrate`
// runs and reports. opts.NoMigrate is ignored.
func MigrateVersions(ctx context.Context, path string, opts Options) (sqlmigrate.Result, error) {
	opts.NoMigrate = false
	s, err := Open(ctx, path, opts)
	if err != nil {
		return sqlmigrate.Result{}, err
	}
	return s.migrated, s.Close()
}

func (s *Store) open(ctx context.Context, o Options) error {
	var err error
	if s.w, err = sql.Open("sqlite", dsn(s.path, o, false)); err != nil {
		return err
	}
	s.w.SetMaxOpenConns(1)
	s.w.SetMaxIdleConns(1)
	s.w.SetConnMaxLifetime(0)
	s.w.SetConnMaxIdleTime(0)
	if o.NoMigrate {
		if err := checkVersion(ctx, s.w, s.table); err != nil {
			return err
		}
	} else if s.migrated, err = migrate(ctx, s.w, s.table, time.Now()); err != nil {
		return err
	}
	if s.r, err = sql.Open("sqlite", dsn(s.path, o, true)); err != nil {
		return err
	}
	s.r.SetMaxOpenConns(o.Readers)
	s.r.SetMaxIdleConns(o.Readers)
	s.r.SetConnMaxLifetime(0)
	s.r.SetConnMaxIdleTime(0)

	q := queries(s.table)
	for _, p := range []struct {
		db   *sql.DB
		dst  **sql.Stmt
		text string
	}{
		{s.r, &s.get, q.get},
		{s.w, &s.wget, q.get},
		{s.w, &s.upsert, q.upsert},
		{s.w, &s.complete, q.complete},
		{s.w, &s.release, q.release},
		{s.w, &s.extend, q.extend},
		{s.w, &s.del, q.del},
		{s.w, &s.sweep, q.sweep},
	} {
		if *p.dst, err = p.db.PrepareContext(ctx, p.text); err != nil {
			return err
		}
	}
	return nil
}

// dsn returns the modernc.org/sqlite data source name for the file at abs: a writer (WAL,
// the synchronous setting, BEGIN IMMEDIATE transactions) or a query-only reader. Both wait
// BusyTimeout for other processes' locks.
func dsn(abs string, o Options, reader bool) string {
	q := url.Values{}
	q.Add("_pragma", "busy_timeout("+strconv.FormatInt(o.BusyTimeout.Milliseconds(), 10)+")")
	if reader {
		q.Add("_pragma", "query_only(1)")
	} else {
		q.Add("_pragma", "journal_mode(WAL)")
		q.Add("_pragma", "synchronous("+o.Synchronous+")")
		q.Set("_txlock", "immediate")
	}
	p := filepath.ToSlash(abs)
	if !strings.HasPrefix(p, "/") {
		p = "/" + p // a Windows drive letter: file:/C:/…
	}
	// In a URI file name, %, ? and # would be read as escapes, the query and the fragment.
	p = strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23").Replace(p)
	return "file:" + p + "?" + q.Encode()
}

// Path returns the absolute path of the database file.
func (s *Store) Path() string { return s.path }

// Table returns the name of the records table.
func (s *Store) Table() string { return s.table }

// Close closes the store's connections. Every later call fails with idem.ErrClosed. Calls in flight
// finish first. It is safe to call twice; the second call does nothing.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	return s.closeAll()
}

func (s *Store) closeAll() error {
	var errs []error
	for _, st := range []*sql.Stmt{s.get, s.wget, s.upsert, s.complete, s.release, s.extend, s.del, s.sweep} {
		if st != nil {
			errs = append(errs, st.Close())
		}
	}
	for _, db := range []*sql.DB{s.r, s.w} {
		if db != nil {
			errs = append(errs, db.Close())
		}
	}
	return errors.Join(errs...)
}

// ready fails if the store is closed or ctx is done.
func (s *Store) ready(ctx context.Context) error { return storeerr.Ready(ctx, s.closed.Load()) }

// fail wraps a driver error with the operation's name. An error caused by Close racing the
// call is reported as idem.ErrClosed.
func (s *Store) fail(op string, err error) error {
	if s.closed.Load() {
		return fmt.Errorf("sqlitestore: %s: %w (%v)", op, idem.ErrClosed, err)
	}
	return fmt.Errorf("sqlitestore: %s: %w", op, err)
}

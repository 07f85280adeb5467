package sqlmigrate

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strconv"
	"strings"
	"time"
)

// Migration is one versioned schema step.
type Migration struct {
	// Version is the step's number: 1 for the first file, and so on without gaps.
	Version int
	// Name is the file name without its extension, such as "0001_records".
	Name string
	// SQL is the file's text, placeholders not yet expanded.
	SQL string
}

// ErrNewerSchema is returned by Run when the database holds a schema version above every
// migration this release knows: an older binary must not write to a newer schema.
var ErrNewerSchema = errors.New("sqlmigrate: the database schema is newer than this release")

// Load reads dir/NNNN_name.sql from fsys, in order. Versions must run 1, 2, 3, … without gaps
// or duplicates, and there must be at least one file.
func Load(fsys fs.FS, dir string) ([]Migration, error) {
	names, err := fs.Glob(fsys, path.Join(dir, "*.sql"))
	if err != nil {
		return nil, err
	}
	var ms []Migration
	for _, n := range names { // fs.Glob returns names in lexical order
		base := path.Base(n)
		num, _, ok := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || len(num) != 4 {
			return nil, fmt.Errorf("sqlmigrate: %s: name is not NNNN_name.sql", n)
		}
		if v != len(ms)+1 {
			return nil, fmt.Errorf("sqlmigrate: %s: version %d, want %d", n, v, len(ms)+1)
		}
		b, err := fs.ReadFile(fsys, n)
		if err != nil {
			return nil, err
		}
		ms = append(ms, Migration{Version: v, Name: strings.TrimSuffix(base, ".sql"), SQL: string(b)})
	}
	if len(ms) == 0 {
		return nil, fmt.Errorf("sqlmigrate: no migrations in %s", dir)
	}
	return ms, nil
}

// MustLoad is Load for embedded files, which cannot be wrong at run time: it panics on error.
func MustLoad(fsys fs.FS, dir string) []Migration {
	ms, err := Load(fsys, dir)
	if err != nil {
		panic(err)
	}
	return ms
}

// Expand replaces each {{name}} in sql with vars[name]. The values must already be quoted
// identifiers: Expand does no quoting.
func Expand(sql string, vars map[string]string) string {
	for k, v := range vars {
		sql = strings.ReplaceAll(sql, "{{"+k+"}}", v)
	}
	return sql
}

// Statements splits a migration into statements at semicolons that end a line, dropping
// comment-only lines, for drivers that run one statement per call (MySQL).
func Statements(sql string) []string {
	var out []string
	var cur strings.Builder
	for line := range strings.Lines(sql) {
		t := strings.TrimSpace(line)
		if t == "" || strings.HasPrefix(t, "--") {
			continue
		}
		cur.WriteString(line)
		if strings.HasSuffix(t, ";") {
			if s := strings.TrimSuffix(strings.TrimSpace(cur.String()), ";"); s != "" {
				out = append(out, s)
			}
			cur.Reset()
		}
	}
	if s := strings.TrimSpace(cur.String()); s != "" {
		out = append(out, s)
	}
	return out
}

// Target is what Run needs from a database. A backend implements it on one connection.
type Target interface {
	// Lock takes the migration lock, waiting for another migrator to finish, and returns
	// the function that releases it. Migrators of the same database serialize on it.
	Lock(ctx context.Context) (unlock func(context.Context) error, err error)
	// Version returns the highest applied version, 0 when none (creating the version table
	// if it does not exist). It is called with the lock held.
	Version(ctx context.Context) (int, error)
	// Apply runs m and records its version, atomically where the database allows it. It is
	// called with the lock held, in version order.
	Apply(ctx context.Context, m Migration) error
}

// lockReleaseTimeout bounds the release of the migration lock after Run.
const lockReleaseTimeout = 10 * time.Second

// ErrNoTable is wrapped by the errors of stores opened without migrating (the migrate=false
// of a store URL) when their records table does not exist: it was never created, or the
// table, schema or file named is not the one meant.
var ErrNoTable = errors.New("no idem table")

// Result is what Run did to a table's schema: its version before and after. From is 0 when
// the table did not exist.
type Result struct {
	From, To int
}

// Applied returns how many steps were applied.
func (r Result) Applied() int { return r.To - r.From }

// String says what was done: "created (version M)", "migrated from N to M" or
// "up to date (version M)".
func (r Result) String() string {
	switch {
	case r.From == r.To:
		return fmt.Sprintf("up to date (version %d)", r.To)
	case r.From == 0:
		return fmt.Sprintf("created (version %d)", r.To)
	}
	return fmt.Sprintf("migrated from %d to %d", r.From, r.To)
}

// Run brings t up to the last of ms and returns the version it found and the one it left. It
// holds t's lock throughout, so two processes migrating at once apply each step once: the
// second finds the work done (From equals To). A database already at the last version is left
// untouched. On error the Result says how far it got.
func Run(ctx context.Context, t Target, ms []Migration) (res Result, err error) {
	unlock, err := t.Lock(ctx)
	if err != nil {
		return res, fmt.Errorf("sqlmigrate: lock: %w", err)
	}
	defer func() {
		// Unlock even when ctx has ended, so the lock does not outlive a cancelled run.
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), lockReleaseTimeout)
		defer cancel()
		if uerr := unlock(uctx); uerr != nil && err == nil {
			err = fmt.Errorf("sqlmigrate: unlock: %w", uerr)
		}
	}()
	v, err := t.Version(ctx)
	if err != nil {
		return res, fmt.Errorf("sqlmigrate: read version: %w", err)
	}
	res = Result{From: v, To: v}
	last := ms[len(ms)-1].Version
	if v > last {
		return res, fmt.Errorf("%w: version %d, this release knows up to %d", ErrNewerSchema, v, last)
	}
	for _, m := range ms[v:] {
		if err := t.Apply(ctx, m); err != nil {
			return res, fmt.Errorf("sqlmigrate: migration %s: %w", m.Name, err)
		}
		res.To = m.Version
	}
	return res, nil
}

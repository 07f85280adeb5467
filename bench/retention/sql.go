package retention

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	_ "modernc.org/sqlite" // the "sqlite" database/sql driver, to fill SQLite files

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/mysqlstore"
	"github.com/idemkit/idem/store/pgstore"
	"github.com/idemkit/idem/store/sqlitestore"
	"github.com/idemkit/idem/store/storekit"
)

// Key shape: a scope, then a UUID-shaped key whose first 16 hex digits are x (61 bytes). Keys
// sort by x, so generating them in x order appends to every index.
const (
	keyPrefix = "3f9a1c7e5b2d4068:"
	keySuffix = "-8b3e-4f21-a6d0-5c7e9f1b2a34"
	// stride spreads the generated keys over the key space: record i has x = i × stride, and
	// new keys take the x values between them.
	stride = 1000003
	// minReplayed is how many records a table of size 0 gets anyway, for the replays to find.
	minReplayed = 10000
)

// Key returns the storage key with number x, as the generated records and the runs use it.
func Key(x int64) string { return fmt.Sprintf("%s%016x%s", keyPrefix, x, keySuffix) }

// SQLConfig configures SQL.
type SQLConfig struct {
	// Engines to measure, of "postgres", "mysql" and "sqlite". Default all three.
	Engines []string
	// Sizes are the numbers of records in the tables before the runs. Default 0, 1,000,000
	// and 10,000,000. A size below 10,000 gets 10,000 records anyway, for the replays.
	Sizes []int
	// PostgresURL, MySQLDSN: the servers. SQLiteDir: where the SQLite files go.
	PostgresURL, MySQLDSN, SQLiteDir string
	// Run is the length of one measured run. Default 5s.
	Run time.Duration
	// Rounds is how many times every run is repeated, the sizes interleaved. Default 3.
	Rounds int
	// Warmup is how many rounds run first, uncounted (retentionbench runs one). A table just
	// filled in key order has full pages, so the first new keys split pages at every insert,
	// and their writes run beside the next runs: a table that has been serving for a while is
	// past that, and the counted rounds measure it so.
	Warmup int
	// Clients is the number of goroutines calling the store. Default 16.
	Clients int
	// Keep keeps the filled tables (and reuses them next time) instead of dropping them.
	Keep bool
	// Progress receives progress lines. Default io.Discard.
	Progress io.Writer
}

func (c SQLConfig) withDefaults() SQLConfig {
	if len(c.Engines) == 0 {
		c.Engines = []string{"postgres", "mysql", "sqlite"}
	}
	if len(c.Sizes) == 0 {
		c.Sizes = []int{0, 1_000_000, 10_000_000}
	}
	c.PostgresURL = cmp.Or(c.PostgresURL, "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
	c.MySQLDSN = cmp.Or(c.MySQLDSN, "root@tcp(127.0.0.1:3306)/test")
	c.Run = cmp.Or(c.Run, 5*time.Second)
	c.Rounds = cmp.Or(c.Rounds, 3)
	c.Warmup = max(0, c.Warmup)
	c.Clients = cmp.Or(c.Clients, 16)
	if c.Progress == nil {
		c.Progress = io.Discard
	}
	return c
}

// Result is one run: an engine, a table size, a path, a round.
type Result struct {
	Engine string
	Size   int // records in the table before the runs
	Path   string
	Round  int
	Ops    int
	Errors int
	Rate   float64 // ops/s
}

// table is one filled table of one engine.
type table struct {
	size   int
	filled int // records generated (at least minReplayed)
	store  idem.Store
	drop   func(context.Context) error
}

// SQL fills the tables and measures them, and returns every run's result.
func SQL(ctx context.Context, cfg SQLConfig) ([]Result, error) {
	cfg = cfg.withDefaults()
	sizes := slices.Clone(cfg.Sizes)
	slices.Sort(sizes)
	fp := idem.Fingerprint([]byte(`{"amount":1000,"currency":"eur"}`))
	resp := storekit.EncodeResponse(idem.Response{Status: 201,
		Header: map[string][]string{"Content-Type": {"application/json"}},
		Body: []byte(`{"id":"ch_3MmlLrLkdIwHu7ix0snN0B15","object":"charge","amount":1000,"currency":"eur",` +
			`"status":"succeeded","created":1764547200,"customer":"cus_NffrFeUfNV2Hib"}`)})
	var results []Result
	for _, engine := range cfg.Engines {
		tables := make([]*table, 0, len(sizes))
		cleanup := func() {
			for _, t := range tables {
				if t.drop != nil { // closes the connections; drops the table unless cfg.Keep
					if err := t.drop(context.WithoutCancel(ctx)); err != nil {
						fmt.Fprintf(cfg.Progress, "%s: drop: %v\n", engine, err)
					}
				}
			}
		}
		var pool *pgxpool.Pool // one for PostgreSQL's tables: the server's connections are shared
		if engine == "postgres" {
			var err error
			if pool, err = pgxpool.New(ctx, cfg.PostgresURL+sep(cfg.PostgresURL)+"pool_max_conns="+strconv.Itoa(cfg.Clients)); err != nil {
				return results, err
			}
		}
		closePool := func() {
			if pool != nil {
				pool.Close()
			}
		}
		for _, size := range sizes {
			start := time.Now()
			t, err := openTable(ctx, cfg, engine, size, fp, resp, pool)
			if err != nil {
				cleanup()
				closePool()
				return results, fmt.Errorf("%s, %d records: %w", engine, size, err)
			}
			tables = append(tables, t)
			fmt.Fprintf(cfg.Progress, "%s: table of %d records ready in %s\n", engine, t.filled, time.Since(start).Round(time.Second))
		}
		for round := 1 - cfg.Warmup; round <= cfg.Rounds; round++ {
			for _, t := range tables {
				for _, path := range []string{"new key", "replay"} {
					r, added := measure(ctx, cfg, t, path, fp)
					if err := t.remove(ctx, cfg.Clients, added); err != nil {
						cleanup()
						closePool()
						return results, fmt.Errorf("%s, %d records: deleting the new keys: %w", engine, t.size, err)
					}
					r.Engine, r.Size, r.Round = engine, t.size, round
					if round < 1 {
						fmt.Fprintf(cfg.Progress, "%s warm-up, %d records, %s: %.0f ops/s (%d errors)\n", engine, t.size, path, r.Rate, r.Errors)
						continue
					}
					fmt.Fprintf(cfg.Progress, "%s round %d, %d records, %s: %.0f ops/s (%d errors)\n", engine, round, t.size, path, r.Rate, r.Errors)
					results = append(results, r)
				}
			}
		}
		cleanup()
		closePool()
	}
	if !cfg.Keep && slices.Contains(cfg.Engines, "postgres") {
		if err := dropPostgresSchema(context.WithoutCancel(ctx), cfg.PostgresURL); err != nil {
			return results, err
		}
	}
	return results, nil
}

// dropPostgresSchema drops the schema of the PostgreSQL tables, once they are dropped.
func dropPostgresSchema(ctx context.Context, url string) error {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	_, err = pool.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgSchema+` CASCADE`)
	return err
}

func removeIfExists(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// remove deletes the records of keys with clients goroutines, so that a new-key run leaves the
// table at its size: the smallest table would otherwise grow several times over in a run.
func (t *table) remove(ctx context.Context, clients int, keys []string) error {
	del, ok := t.store.(idem.Deleter)
	if !ok || len(keys) == 0 {
		return nil
	}
	var next atomic.Int64
	var first error
	var once sync.Once
	var wg sync.WaitGroup
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1) - 1; i < int64(len(keys)); i = next.Add(1) - 1 {
				if err := del.Delete(ctx, keys[i]); err != nil {
					once.Do(func() { first = err })
					return
				}
			}
		}()
	}
	wg.Wait()
	return first
}

// measure runs cfg.Clients goroutines on path for cfg.Run. It returns the result and the keys
// a new-key run added.
func measure(ctx context.Context, cfg SQLConfig, t *table, path string, fp string) (Result, []string) {
	var ops, errs atomic.Int64
	var mu sync.Mutex
	var added []string
	deadline := time.Now().Add(cfg.Run)
	resp := idem.Response{Status: 201, Body: []byte(`{"id":"ch_new"}`)}
	var wg sync.WaitGroup
	start := time.Now()
	for range cfg.Clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []string
			defer func() {
				mu.Lock()
				added = append(added, mine...)
				mu.Unlock()
			}()
			for time.Now().Before(deadline) {
				var err error
				now := time.Now()
				if path == "new key" {
					x := rand.Int64N(int64(t.filled+1) * stride)
					if x%stride == 0 {
						x++ // between the generated records, never one of them
					}
					var res idem.Reservation
					res, err = t.store.Reserve(ctx, idem.ReserveRequest{Key: Key(x), Fingerprint: fp, Now: now, Lease: 30 * time.Second, TTL: 24 * time.Hour})
					if err == nil && !res.Claimed {
						// Drawn before, by this run or an earlier round: not a new key, and
						// not an error either. Draw again.
						continue
					}
					if err == nil {
						mine = append(mine, Key(x))
						err = t.store.Complete(ctx, Key(x), res.Record.Token, resp, now, now.Add(24*time.Hour))
					}
				} else {
					x := (1 + rand.Int64N(int64(t.filled))) * stride
					var res idem.Reservation
					res, err = t.store.Reserve(ctx, idem.ReserveRequest{Key: Key(x), Fingerprint: fp, Now: now, Lease: 30 * time.Second, TTL: 24 * time.Hour})
					if err == nil && (res.Claimed || res.Record.State != idem.StateCompleted) {
						err = errors.New("replay did not find the completed record")
					}
				}
				if err != nil {
					errs.Add(1)
					continue
				}
				ops.Add(1)
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	return Result{Path: path, Ops: int(ops.Load()), Errors: int(errs.Load()), Rate: float64(ops.Load()) / el.Seconds()}, added
}

func openTable(ctx context.Context, cfg SQLConfig, engine string, size int, fp string, resp []byte, pool *pgxpool.Pool) (*table, error) {
	t := &table{size: size, filled: max(size, minReplayed)}
	now := time.Now().UnixMicro()
	exp := time.Now().Add(365 * 24 * time.Hour).UnixMicro()
	switch engine {
	case "postgres":
		return t, openPostgres(ctx, cfg, pool, t, fp, resp, now, exp)
	case "mysql":
		return t, openMySQL(ctx, cfg, t, fp, resp, now, exp)
	case "sqlite":
		return t, openSQLite(ctx, cfg, t, fp, resp, now, exp)
	}
	return nil, fmt.Errorf("unknown engine %q (want postgres, mysql or sqlite)", engine)
}

// chunk is how many records one filling statement writes.
const chunk = 1_000_000

const pgSchema = "idem_bench_retention"

func openPostgres(ctx context.Context, cfg SQLConfig, pool *pgxpool.Pool, t *table, fp string, resp []byte, now, exp int64) error {
	name := "r_" + strconv.Itoa(t.size)
	st, err := pgstore.New(pool, pgstore.Options{Schema: pgSchema, Table: name})
	if err == nil {
		err = st.Migrate(ctx)
	}
	if err != nil {
		return err
	}
	t.store = st
	t.drop = func(ctx context.Context) error {
		if cfg.Keep {
			return nil
		}
		_, err := pool.Exec(ctx, `DROP TABLE IF EXISTS `+st.Table())
		if err == nil {
			_, err = pool.Exec(ctx, `DELETE FROM `+pgSchema+`.`+pgstore.MigrationsTable+` WHERE tbl = $1`, name)
		}
		return err
	}
	var have int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+st.Table()).Scan(&have); err != nil {
		return err
	}
	if have >= t.filled {
		return prewarmPostgres(ctx, cfg, pool, st.Table(), name)
	}
	// Fill without the indexes, then build them: a sort instead of t.filled index inserts.
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	tbl := st.Table()
	for _, q := range []string{
		`SET synchronous_commit = off`, `SET maintenance_work_mem = '256MB'`,
		`TRUNCATE ` + tbl,
		`ALTER TABLE ` + tbl + ` DROP CONSTRAINT ` + name + `_pkey`,
		`DROP INDEX ` + pgSchema + `.` + name + `_expires_at`,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	for lo := 1; lo <= t.filled; lo += chunk {
		hi := min(lo+chunk-1, t.filled)
		_, err := conn.Exec(ctx, `INSERT INTO `+tbl+` (key, fingerprint, state, token, lease_until, attempts, response, created_at, completed_at, expires_at)
			SELECT $1 || lpad(to_hex(i * `+strconv.Itoa(stride)+`), 16, '0') || $2, $3, 2, $4, $4, 1, $5, $4, $4, $6
			FROM generate_series($7::bigint, $8::bigint) AS i`, keyPrefix, keySuffix, fp, now, resp, exp, lo, hi)
		if err != nil {
			return err
		}
		fmt.Fprintf(cfg.Progress, "postgres: %d of %d records\n", hi, t.filled)
	}
	for _, q := range []string{
		`ALTER TABLE ` + tbl + ` ADD CONSTRAINT ` + name + `_pkey PRIMARY KEY (key)`,
		`CREATE INDEX ` + name + `_expires_at ON ` + tbl + ` (expires_at)`,
		`VACUUM ANALYZE ` + tbl,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	return prewarmPostgres(ctx, cfg, pool, tbl, name)
}

// prewarmPostgres loads the table and its primary key into shared_buffers with pg_prewarm, as
// a server that has served them for a while holds them: the runs then measure the table's size,
// not a cold cache. Where pg_prewarm is not installed it says so and goes on.
func prewarmPostgres(ctx context.Context, cfg SQLConfig, pool *pgxpool.Pool, tbl, name string) error {
	if _, err := pool.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_prewarm`); err != nil {
		fmt.Fprintf(cfg.Progress, "postgres: no pg_prewarm (%v): the tables are not prewarmed\n", err)
		return nil
	}
	var pages int64
	err := pool.QueryRow(ctx, `SELECT pg_prewarm($1::regclass) + pg_prewarm($2::regclass)`, tbl, pgSchema+"."+name+"_pkey").Scan(&pages)
	if err != nil {
		return fmt.Errorf("pg_prewarm: %w", err)
	}
	fmt.Fprintf(cfg.Progress, "postgres: %s prewarmed, %d pages\n", tbl, pages)
	return nil
}

func sep(url string) string {
	if strings.Contains(url, "?") {
		return "&"
	}
	if strings.Contains(url, "://") {
		return "?"
	}
	return " "
}

func openMySQL(ctx context.Context, cfg SQLConfig, t *table, fp string, resp []byte, now, exp int64) error {
	name := "idem_bench_retention_" + strconv.Itoa(t.size)
	st, err := mysqlstore.Open(ctx, cfg.MySQLDSN, mysqlstore.Options{Table: name})
	if err != nil {
		return err
	}
	if err := st.Migrate(ctx); err != nil {
		st.Close()
		return err
	}
	db := st.DB()
	db.SetMaxOpenConns(cfg.Clients)
	db.SetMaxIdleConns(cfg.Clients)
	t.store = st
	t.drop = func(ctx context.Context) error {
		defer st.Close()
		if cfg.Keep {
			return nil
		}
		if _, err := db.ExecContext(ctx, `DROP TABLE IF EXISTS `+st.Table()); err != nil {
			return err
		}
		_, err := db.ExecContext(ctx, `DELETE FROM `+mysqlstore.MigrationsTable+` WHERE tbl = ?`, name)
		return err
	}
	var have int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM `+st.Table()).Scan(&have); err != nil {
		return err
	}
	if have >= t.filled {
		return prewarmMySQL(ctx, cfg, db, st.Table())
	}
	if _, err := db.ExecContext(ctx, `TRUNCATE TABLE `+st.Table()); err != nil {
		return err
	}
	// In key order: InnoDB clusters rows on the primary key, so each chunk appends.
	seq := func(lo, hi int) string {
		return fmt.Sprintf("(SELECT seq AS i FROM seq_%d_to_%d)", lo, hi)
	}
	if _, err := db.ExecContext(ctx, `SELECT 1 FROM seq_1_to_1`); err != nil {
		// MySQL: no SEQUENCE engine; a cross join of digits instead.
		digits := `(SELECT 0 d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9)`
		seq = func(lo, hi int) string {
			return fmt.Sprintf(`(SELECT %d + a.d + 10*b.d + 100*c.d + 1000*e.d + 10000*f.d + 100000*g.d AS i FROM %s a, %s b, %s c, %s e, %s f, %s g HAVING i <= %d)`,
				lo, digits, digits, digits, digits, digits, digits, hi)
		}
	}
	for lo := 1; lo <= t.filled; lo += chunk {
		hi := min(lo+chunk-1, t.filled)
		_, err := db.ExecContext(ctx, `INSERT INTO `+st.Table()+` (`+"`key`"+`, fingerprint, state, token, lease_until, attempts, response, created_at, completed_at, expires_at)
			SELECT CONCAT(?, LPAD(LOWER(HEX(s.i * `+strconv.Itoa(stride)+`)), 16, '0'), ?), ?, 2, ?, ?, 1, ?, ?, ?, ?
			FROM `+seq(lo, hi)+` s ORDER BY s.i`, keyPrefix, keySuffix, fp, now, now, resp, now, now, exp)
		if err != nil {
			return err
		}
		fmt.Fprintf(cfg.Progress, "mysql: %d of %d records\n", hi, t.filled)
	}
	if _, err = db.ExecContext(ctx, `ANALYZE TABLE `+st.Table()); err != nil {
		return err
	}
	if err := settleMySQL(ctx, cfg, db); err != nil {
		return err
	}
	return prewarmMySQL(ctx, cfg, db, st.Table())
}

// settleMySQL waits until InnoDB has written out the pages the fill dirtied (at most 1% of
// the buffer pool left dirty, or 5 minutes), so that the first round does not run beside the
// page cleaner writing gigabytes: a server that has been serving the table carries no such
// backlog. It lowers innodb_max_dirty_pages_pct to 0 meanwhile, which makes the page cleaner
// flush at full speed, and gives the setting back.
func settleMySQL(ctx context.Context, cfg SQLConfig, db *sql.DB) error {
	var pct string
	if err := db.QueryRowContext(ctx, `SELECT @@innodb_max_dirty_pages_pct`).Scan(&pct); err != nil {
		return fmt.Errorf("settle: %w", err)
	}
	if _, err := db.ExecContext(ctx, `SET GLOBAL innodb_max_dirty_pages_pct = 0`); err != nil {
		fmt.Fprintf(cfg.Progress, "mysql: cannot speed up flushing (%v): waiting at the server's pace\n", err)
	} else {
		defer func() {
			_, _ = db.ExecContext(context.WithoutCancel(ctx), `SET GLOBAL innodb_max_dirty_pages_pct = `+pct)
		}()
	}
	status := func(name string) (int64, error) {
		var n string
		var v int64
		err := db.QueryRowContext(ctx, `SHOW GLOBAL STATUS LIKE '`+name+`'`).Scan(&n, &v)
		return v, err
	}
	start := time.Now()
	for {
		dirty, err := status("Innodb_buffer_pool_pages_dirty")
		if err != nil {
			return fmt.Errorf("settle: %w", err)
		}
		total, err := status("Innodb_buffer_pool_pages_total")
		if err != nil {
			return fmt.Errorf("settle: %w", err)
		}
		switch {
		case dirty*100 <= total:
			fmt.Fprintf(cfg.Progress, "mysql: %d dirty pages of %d after %s\n", dirty, total, time.Since(start).Round(time.Second))
			return nil
		case time.Since(start) > 5*time.Minute:
			fmt.Fprintf(cfg.Progress, "mysql: still %d dirty pages of %d after %s: going on\n", dirty, total, time.Since(start).Round(time.Second))
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
}

// prewarmMySQL reads the whole table through its primary key, where InnoDB keeps the rows, so
// the buffer pool holds what it has room for, as on a server that has served the table for a
// while.
func prewarmMySQL(ctx context.Context, cfg SQLConfig, db *sql.DB, tbl string) error {
	var n sql.NullInt64
	if err := db.QueryRowContext(ctx, `SELECT SUM(LENGTH(response)) FROM `+tbl+` FORCE INDEX (PRIMARY)`).Scan(&n); err != nil {
		return fmt.Errorf("prewarm: %w", err)
	}
	var pool int64
	_ = db.QueryRowContext(ctx, `SELECT @@innodb_buffer_pool_size`).Scan(&pool)
	fmt.Fprintf(cfg.Progress, "mysql: %s prewarmed (innodb_buffer_pool_size %d MB)\n", tbl, pool>>20)
	return nil
}

func openSQLite(ctx context.Context, cfg SQLConfig, t *table, fp string, resp []byte, now, exp int64) error {
	if cfg.SQLiteDir == "" {
		return errors.New("SQLiteDir is empty")
	}
	path := filepath.Join(cfg.SQLiteDir, "retention-"+strconv.Itoa(t.size)+".db")
	opt := sqlitestore.Options{Table: "records"}
	if err := sqlitestore.Migrate(ctx, path, opt); err != nil {
		return err
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		return err
	}
	var have int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM records`).Scan(&have); err != nil {
		db.Close()
		return err
	}
	if have < t.filled {
		for _, q := range []string{`PRAGMA journal_mode = WAL`, `PRAGMA synchronous = OFF`, `DELETE FROM records`} {
			if _, err := db.ExecContext(ctx, q); err != nil {
				db.Close()
				return err
			}
		}
		for lo := 1; lo <= t.filled; lo += chunk {
			hi := min(lo+chunk-1, t.filled)
			_, err := db.ExecContext(ctx, `WITH RECURSIVE c(i) AS (SELECT ? UNION ALL SELECT i + 1 FROM c WHERE i < ?)
				INSERT INTO records (key, fingerprint, state, token, lease_until, attempts, response, created_at, completed_at, expires_at)
				SELECT ? || printf('%016x', i * `+strconv.Itoa(stride)+`) || ?, ?, 2, ?, ?, 1, ?, ?, ?, ? FROM c`,
				lo, hi, keyPrefix, keySuffix, fp, now, now, resp, now, now, exp)
			if err != nil {
				db.Close()
				return err
			}
			fmt.Fprintf(cfg.Progress, "sqlite: %d of %d records\n", hi, t.filled)
		}
		if _, err := db.ExecContext(ctx, `ANALYZE`); err != nil {
			db.Close()
			return err
		}
		if _, err := db.ExecContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
			db.Close()
			return err
		}
	}
	if err := db.Close(); err != nil {
		return err
	}
	if err := prewarmSQLite(cfg, path); err != nil {
		return err
	}
	st, err := sqlitestore.Open(ctx, path, opt)
	if err != nil {
		return err
	}
	t.store = st
	t.drop = func(context.Context) error {
		err := st.Close()
		if !cfg.Keep {
			for _, suffix := range []string{"", "-wal", "-shm"} {
				if rerr := removeIfExists(path + suffix); err == nil {
					err = rerr
				}
			}
		}
		return err
	}
	return nil
}

// prewarmSQLite writes out what the fill left in the operating system's cache and reads the
// file once. The fill runs with synchronous OFF, so without the first the kernel would write
// gigabytes back during the first rounds, slowing every read behind it; without the second the
// first rounds would read from disk what a store that has been serving the file finds in memory
// (SQLite's own cache is small: its reads go to the operating system's).
func prewarmSQLite(cfg SQLConfig, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	start := time.Now()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("prewarm: %w", err)
	}
	synced := time.Since(start)
	n, err := io.Copy(io.Discard, f)
	if err != nil {
		return fmt.Errorf("prewarm: %w", err)
	}
	fmt.Fprintf(cfg.Progress, "sqlite: %s written out in %s, %d MB read in %s\n",
		filepath.Base(path), synced.Round(time.Millisecond), n>>20, (time.Since(start) - synced).Round(time.Millisecond))
	return nil
}

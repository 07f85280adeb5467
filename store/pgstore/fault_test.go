package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/store/pgstore"
	"github.com/idemkit/idem/store/storetest"
)

// A statement that waits too long fails with PostgreSQL's statement timeout, promptly, and
// changes nothing.
func TestStatementTimeout(t *testing.T) {
	t.Parallel()
	st := newStore(t, pgstore.Options{})
	ctx := context.Background()
	fp := idem.Fingerprint([]byte("x"))
	now := time.Now()
	res, err := st.Reserve(ctx, idem.ReserveRequest{Key: "k", Fingerprint: fp, Now: now, Lease: time.Minute, TTL: time.Hour})
	if err != nil || !res.Claimed {
		t.Fatal(err)
	}
	// Another transaction holds the row.
	tx, err := st.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SELECT 1 FROM `+st.Table()+` WHERE key = 'k' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	cfg := pool(t).Config()
	cfg.MaxConns = 2
	cfg.ConnConfig.RuntimeParams["statement_timeout"] = "200"
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	timed, _ := pgstore.New(p, pgstore.Options{Schema: testSchema, Table: tableOf(st)})
	start := time.Now()
	_, err = timed.Reserve(ctx, idem.ReserveRequest{Key: "k", Fingerprint: fp, Now: now.Add(2 * time.Minute), Lease: time.Minute, TTL: time.Hour}) // a takeover: it must wait for the row
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "57014" {
		t.Fatalf("Reserve on a locked row = %v, want a statement timeout (57014)", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("statement timeout took %v", d)
	}
	err = timed.Complete(ctx, "k", res.Record.Token, idem.Response{Status: 200}, now, now.Add(time.Hour))
	if !errors.As(err, &pgErr) || pgErr.Code != "57014" {
		t.Fatalf("Complete on a locked row = %v, want a statement timeout", err)
	}
	_ = tx.Rollback(ctx)
	rec, err := st.Get(ctx, "k")
	if err != nil || rec.Token != res.Record.Token || rec.State != idem.StateInProgress {
		t.Fatalf("record after timeouts: %+v %v, want the claim untouched", rec, err)
	}
}

// A full pool is a clear error within the caller's deadline, and the pool recovers.
func TestPoolExhausted(t *testing.T) {
	t.Parallel()
	st0 := newStore(t, pgstore.Options{})
	ctx := context.Background()
	cfg := pool(t).Config()
	cfg.MaxConns = 1
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	st, _ := pgstore.New(p, pgstore.Options{Schema: testSchema, Table: tableOf(st0)})
	held, err := p.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	fp := idem.Fingerprint(nil)
	c, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = st.Reserve(c, idem.ReserveRequest{Key: "k", Fingerprint: fp, Now: time.Now(), Lease: time.Minute, TTL: time.Hour})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Reserve on a full pool = %v, want context.DeadlineExceeded", err)
	}
	if d := time.Since(start); d < 250*time.Millisecond || d > 2*time.Second {
		t.Errorf("Reserve on a full pool returned after %v, want about the 300ms deadline", d)
	}
	// Through the engine it is a store error: no effect ran.
	eng, _ := idem.New(st, idem.Options{})
	c2, cancel2 := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel2()
	_, err = eng.Do(c2, "k", fp, func(context.Context) (idem.Response, error) {
		t.Error("effect ran without a claim")
		return idem.Response{}, nil
	})
	if !errors.Is(err, idem.ErrStoreUnavailable) {
		t.Fatalf("engine on a full pool = %v, want ErrStoreUnavailable", err)
	}
	held.Release()
	if res, err := st.Reserve(ctx, idem.ReserveRequest{Key: "k", Fingerprint: fp, Now: time.Now(), Lease: time.Minute, TTL: time.Hour}); err != nil || !res.Claimed {
		t.Fatalf("after the pool freed up: %v %+v", err, res)
	}
	if n := p.Stat().AcquiredConns(); n != 0 {
		t.Errorf("%d connections still acquired", n)
	}
}

func tableOf(st *pgstore.Store) string {
	var schema, table string
	_, _ = fmt.Sscanf(st.Table(), `%q.%q`, &schema, &table)
	if table == "" {
		table, _ = strconv.Unquote(st.Table())
	}
	return table
}

// privateServer is a throwaway PostgreSQL, so the test can crash and restart it without
// touching the shared one.
type privateServer struct {
	t    *testing.T
	bin  string
	dir  string
	port int
	cred *syscall.Credential
	cmd  *exec.Cmd
}

func startPrivateServer(t *testing.T) *privateServer {
	t.Helper()
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	if len(bins) == 0 {
		testenv.Missing(t, "no initdb under /usr/lib/postgresql/*/bin: the server-restart test needs PostgreSQL's binaries")
		return nil
	}
	s := &privateServer{t: t, bin: filepath.Dir(bins[len(bins)-1])}
	dir, err := os.MkdirTemp("", "idem-pg-")
	if err != nil {
		t.Fatal(err)
	}
	s.dir = dir
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if os.Geteuid() == 0 { // PostgreSQL refuses to run as root: run it as postgres
		u, err := user.Lookup("postgres")
		if err != nil {
			testenv.Missing(t, "running as root and there is no postgres user to run a private server")
			return nil
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		s.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.port = l.Addr().(*net.TCPAddr).Port
	l.Close()
	if out, err := s.command("initdb", "-D", s.data(), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync").CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	s.start()
	t.Cleanup(s.crash)
	return s
}

func (s *privateServer) data() string { return filepath.Join(s.dir, "data") }

func (s *privateServer) url() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", s.port)
}

func (s *privateServer) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(s.bin, name), args...)
	if s.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	}
	return cmd
}

func (s *privateServer) start() {
	s.t.Helper()
	s.cmd = s.command("postgres", "-D", s.data(), "-p", strconv.Itoa(s.port), "-k", s.dir,
		"-c", "listen_addresses=127.0.0.1", "-c", "max_connections=30", "-c", "shared_buffers=16MB")
	log, err := os.OpenFile(filepath.Join(s.dir, "log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		s.t.Fatal(err)
	}
	defer log.Close()
	s.cmd.Stdout, s.cmd.Stderr = log, log
	if err := s.cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		c, err := pgx.Connect(context.Background(), s.url())
		if err == nil {
			c.Close(context.Background())
			return
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(filepath.Join(s.dir, "log"))
			s.t.Fatalf("private server did not start: %v\n%s", err, b)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// crash stops the server the hard way: SIGQUIT, PostgreSQL's immediate shutdown, which ends
// every backend at once without a checkpoint; the next start runs crash recovery.
func (s *privateServer) crash() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGQUIT)
	_ = s.cmd.Wait()
	s.cmd = nil
}

// The server crashes and restarts under load: the store returns errors while it is down,
// never a false "executed" (every execution the engine reported is completed in the database
// after recovery), and the same process goes on working once it is back. With DoTx, retried
// until they succeed, every key's effect happened exactly once.
func TestServerRestartUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a private PostgreSQL")
	}
	t.Parallel()
	t.Run("one statement per call", func(t *testing.T) { serverRestartUnderLoad(t, pgstore.Options{}) })
	t.Run("GroupCommit", func(t *testing.T) { serverRestartUnderLoad(t, pgstore.Options{GroupCommit: 2}) })
}

func serverRestartUnderLoad(t *testing.T, opt pgstore.Options) {
	srv := startPrivateServer(t)
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(srv.url())
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 8
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	st, err := pgstore.New(p, opt)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Exec(ctx, `CREATE TABLE orders (key text NOT NULL, n serial)`); err != nil {
		t.Fatal(err)
	}
	eng, err := idem.New(st, idem.Options{StoreTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}

	var (
		mu        sync.Mutex
		executed  = map[string]idem.Response{} // engine said: ran and stored
		doneTx    = map[string]idem.Response{} // DoTx said: committed or replayed
		errCount  atomic.Int64
		okAfter   atomic.Int64
		restarted atomic.Bool
		stop      = make(chan struct{})
		wg        sync.WaitGroup
	)
	for w := range 4 {
		wg.Go(func() { // the engine, one Do per key
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprintf("e%d-%d", w, i)
				c, cancel := context.WithTimeout(ctx, time.Second)
				res, err := eng.Do(c, key, idem.Fingerprint([]byte(key)), func(context.Context) (idem.Response, error) {
					return idem.Response{Status: 201, Body: []byte(key)}, nil
				})
				cancel()
				if err != nil {
					errCount.Add(1)
					time.Sleep(10 * time.Millisecond)
					continue
				}
				if restarted.Load() {
					okAfter.Add(1)
				}
				if !res.Replayed {
					mu.Lock()
					executed[key] = res.Response
					mu.Unlock()
				}
			}
		})
		wg.Go(func() { // DoTx, each key retried until it succeeds
			for i := 0; ; i++ {
				key := fmt.Sprintf("tx%d-%d", w, i)
				for {
					select {
					case <-stop:
						return
					default:
					}
					c, cancel := context.WithTimeout(ctx, time.Second)
					res, err := st.DoTx(c, key, idem.Fingerprint([]byte(key)), func(ctx context.Context, tx pgx.Tx) (idem.Response, error) {
						_, err := tx.Exec(ctx, `INSERT INTO orders (key) VALUES ($1)`, key)
						return idem.Response{Status: 201, Body: []byte(key)}, err
					})
					cancel()
					if err == nil {
						mu.Lock()
						doneTx[key] = res.Response
						mu.Unlock()
						break
					}
					errCount.Add(1)
					time.Sleep(10 * time.Millisecond)
				}
			}
		})
	}
	time.Sleep(400 * time.Millisecond)
	srv.crash()
	before := errCount.Load()
	time.Sleep(500 * time.Millisecond)
	if errCount.Load() == before {
		t.Error("no errors while the server was down")
	}
	srv.start()
	restarted.Store(true)
	deadline := time.Now().Add(20 * time.Second)
	for okAfter.Load() < 50 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	if okAfter.Load() < 50 {
		t.Fatalf("only %d successful calls after the restart: the process did not recover", okAfter.Load())
	}
	t.Logf("%d engine executions, %d DoTx keys, %d errors, %d successes after the restart",
		len(executed), len(doneTx), errCount.Load(), okAfter.Load())

	for key, resp := range executed {
		rec, err := st.Get(ctx, key)
		if err != nil || rec.State != idem.StateCompleted || rec.Response == nil || !rec.Response.Equal(resp) {
			t.Errorf("engine reported %s executed, but after recovery the record is %+v, %v", key, rec, err)
		}
	}
	rows, err := p.Query(ctx, `SELECT key, count(*) FROM orders GROUP BY key`)
	if err != nil {
		t.Fatal(err)
	}
	effects := map[string]int{}
	for rows.Next() {
		var k string
		var n int
		if err := rows.Scan(&k, &n); err != nil {
			t.Fatal(err)
		}
		effects[k] = n
	}
	rows.Close()
	for key := range doneTx {
		if effects[key] != 1 {
			t.Errorf("DoTx key %s succeeded with %d effects, want exactly 1", key, effects[key])
		}
	}
	for key, n := range effects {
		if n > 1 {
			t.Errorf("key %s has %d effects", key, n)
		}
	}
	if n := p.Stat().AcquiredConns(); n != 0 {
		t.Errorf("%d connections still acquired after the load", n)
	}
}

// A call blocked on a row another transaction holds ends at its context's deadline (pgx cancels
// the statement on the server), with an error that says the deadline passed.
func TestCallEndsAtDeadline(t *testing.T) {
	t.Parallel()
	st := newStore(t, pgstore.Options{})
	storetest.CallsEndAtDeadline(t, st, func(key string) func() { return holdRow(t, st, key) })
}

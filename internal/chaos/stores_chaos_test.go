//go:build chaos

package chaos_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/store/pgstore"
)

// storeServer is the store the gateways share. Crash stops it the hard way; Start brings it
// back on the same address with its data.
type storeServer interface {
	URL() string
	Crash() error
	Start() error
	Close()
}

// freePort returns a loopback port that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func waitPort(port int, d time.Duration) error {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), 200*time.Millisecond)
		if err == nil {
			c.Close()
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("127.0.0.1:%d not open after %s", port, d)
}

// proc is a server process we started and may kill.
type proc struct {
	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

func (p *proc) start(cmd *exec.Cmd) error {
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	p.mu.Lock()
	p.cmd, p.done = cmd, done
	p.mu.Unlock()
	return nil
}

// send sends sig to the running process, and does not wait.
func (p *proc) send(sig os.Signal) error {
	p.mu.Lock()
	cmd := p.cmd
	p.mu.Unlock()
	if cmd == nil {
		return fmt.Errorf("no process")
	}
	return cmd.Process.Signal(sig)
}

// signal sends sig and waits (bounded) for the process to exit.
func (p *proc) signal(sig os.Signal, wait time.Duration) error {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return nil
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-done:
		return nil
	case <-time.After(wait):
		_ = cmd.Process.Kill()
		<-done
		return fmt.Errorf("pid %d did not exit on %v within %s", cmd.Process.Pid, sig, wait)
	}
}

// ---- a private PostgreSQL ----

type privatePG struct {
	bin, data string
	port      int
	cred      *syscall.Credential
	log       *os.File
	p         proc
}

// startPrivatePG initdb's a cluster in a temp dir and starts it on a free loopback port. As
// root, PostgreSQL runs as the postgres user.
func startPrivatePG(t *testing.T) *privatePG {
	t.Helper()
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	if len(bins) == 0 {
		testenv.Missing(t, "no PostgreSQL server binaries under /usr/lib/postgresql/*/bin for the private store server (apt-get install postgresql)")
	}
	sort.Strings(bins)
	s := &privatePG{bin: filepath.Dir(bins[len(bins)-1]), port: freePort(t)}
	dir, err := os.MkdirTemp("", "idem-chaos-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	s.data = filepath.Join(dir, "data")
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			testenv.Missing(t, "running as root and there is no postgres user to run PostgreSQL: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		s.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	if s.log, err = os.Create(filepath.Join(dir, "postgres.log")); err != nil {
		t.Fatal(err)
	}
	if s.cred != nil {
		_ = os.Chown(s.log.Name(), int(s.cred.Uid), int(s.cred.Gid))
	}
	cmd := exec.Command(filepath.Join(s.bin, "initdb"), "-D", s.data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var st *pgstore.Store
	for {
		// The port opens before the server accepts sessions ("the database system is starting up").
		if st, err = pgstore.Open(ctx, s.URL(), pgstore.Options{}); err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	defer st.Close()
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	return s
}

func (s *privatePG) URL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", s.port)
}

func (s *privatePG) Start() error {
	// fsync is off: the harness crashes the server process, not the machine, so what was
	// written survives in the page cache; WAL recovery runs at every restart all the same.
	cmd := exec.Command(filepath.Join(s.bin, "postgres"), "-D", s.data, "-p", strconv.Itoa(s.port),
		"-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories="+filepath.Dir(s.data),
		"-c", "fsync=off", "-c", "max_connections=200")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred, Setpgid: true}
	cmd.Stdout, cmd.Stderr = s.log, s.log
	if err := s.p.start(cmd); err != nil {
		return err
	}
	if err := waitPort(s.port, 30*time.Second); err != nil {
		return err
	}
	return s.accepting(30 * time.Second)
}

// accepting waits until the server runs queries: after a crash the port opens before WAL
// recovery is over ("the database system is starting up").
func (s *privatePG) accepting(d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	for {
		c, err := pgx.Connect(ctx, s.URL())
		if err == nil {
			err = c.Ping(ctx)
			c.Close(ctx)
			if err == nil {
				return nil
			}
		}
		if ctx.Err() != nil {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Crash is an immediate shutdown (SIGQUIT): every backend exits at once without a checkpoint,
// as after a crash, and the next start replays the WAL.
func (s *privatePG) Crash() error { return s.p.signal(syscall.SIGQUIT, 20*time.Second) }

func (s *privatePG) Close() {
	_ = s.p.signal(syscall.SIGQUIT, 20*time.Second)
	s.log.Close()
}

// ---- a private Redis ----

type privateRedis struct {
	dir  string
	port int
	log  *os.File
	p    proc
}

func startPrivateRedis(t *testing.T) *privateRedis {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		testenv.Missing(t, "no redis-server on PATH for the private store server (apt-get install redis-server)")
	}
	s := &privateRedis{dir: t.TempDir(), port: freePort(t)}
	var err error
	if s.log, err = os.Create(filepath.Join(s.dir, "redis.log")); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func (s *privateRedis) URL() string { return fmt.Sprintf("redis://127.0.0.1:%d/0", s.port) }

func (s *privateRedis) Start() error {
	// Every write is fsynced to the append-only file before Redis answers: a Redis that may
	// lose acknowledged writes on restart cannot hold idempotency records.
	cmd := exec.Command("redis-server", "--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--dir", s.dir, "--save", "", "--appendonly", "yes", "--appendfsync", "always", "--daemonize", "no")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Stdout, cmd.Stderr = s.log, s.log
	if err := s.p.start(cmd); err != nil {
		return err
	}
	if err := waitPort(s.port, 30*time.Second); err != nil {
		return err
	}
	return s.answering(30 * time.Second)
}

// answering waits until the server answers commands: after a restart the port opens before
// the append-only file is loaded, and until then every command gets "LOADING". A store outage
// lasts until then, not until the port opens.
func (s *privateRedis) answering(d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		reply, err := s.ping()
		if err == nil && reply == "+PONG" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis on port %d does not answer PING: %q %v", s.port, reply, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ping sends one inline PING and returns the first line of the reply.
func (s *privateRedis) ping() (string, error) {
	c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", s.port), time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return "", err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(line), err
}

func (s *privateRedis) Crash() error { return s.p.signal(syscall.SIGKILL, 10*time.Second) }

func (s *privateRedis) Close() {
	_ = s.p.signal(syscall.SIGKILL, 10*time.Second)
	s.log.Close()
}

// ---- a SQLite file: nothing to crash ----

type sqliteFile struct{ path string }

func (s sqliteFile) URL() string  { return "sqlite://" + s.path }
func (s sqliteFile) Crash() error { return nil }
func (s sqliteFile) Start() error { return nil }
func (s sqliteFile) Close()       {}

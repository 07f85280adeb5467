package cli

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/idemkit/idem/internal/syncbuf"
	"github.com/idemkit/idem/store/dynamostore"
	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/gateway"
	"github.com/idemkit/idem/internal/testenv"
)

// storeKinds are the network stores: a URL for each at a host:port naming a table (or key
// prefix) of its own, the address of the test's real server (which skips the test, or fails
// it with IDEM_REQUIRE_SERVICES=1, when it is not running), and a way to remove that table
// from the real server when the test ends. Each test names its own table (newTable), so two
// test processes at once never share one.
var storeKinds = []struct {
	name   string
	url    func(hostport, table string) string
	server func(t *testing.T) string
	drop   func(t *testing.T, table string)
}{
	{"postgres", func(hp, table string) string {
		return "postgres://postgres@" + hp + "/test?sslmode=disable&table=" + table
	},
		func(t *testing.T) string { return testenv.HostPort("5432")(testenv.PostgresURL(t)) },
		func(t *testing.T, table string) { postgresStore(t).dropTable(t, table) }},
	{"mysql", func(hp, table string) string { return "mysql://root@" + hp + "/test?table=" + table },
		func(t *testing.T) string {
			dsn := testenv.MySQLDSN(t)
			if i, j := strings.Index(dsn, "tcp("), strings.Index(dsn, ")"); i >= 0 && j > i {
				return dsn[i+4 : j]
			}
			return testenv.HostPort("3306")(dsn)
		},
		func(t *testing.T, table string) { mysqlStore(t).dropTable(t, table) }},
	{"redis", func(hp, prefix string) string { return "redis://" + hp + "/0?prefix=" + prefix + ":" },
		func(t *testing.T) string { return testenv.RedisAddr(t) },
		func(t *testing.T, prefix string) { dropRedisPrefix(t, testenv.RedisAddr(t), prefix+":") }},
	{"dynamodb", func(hp, table string) string {
		return "dynamodb://" + table + "?endpoint=" + url.QueryEscape("http://"+hp) + "&region=us-east-1&create=true"
	}, dynamoServer,
		func(t *testing.T, table string) {
			ep := "http://" + dynamoServer(t)
			t.Cleanup(func() {
				_, err := dynamostore.LocalClient(ep, nil).DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: aws.String(table)})
				var nf *types.ResourceNotFoundException
				if err != nil && !errors.As(err, &nf) {
					t.Errorf("DeleteTable %s: %v", table, err)
				}
			})
		}},
}

// dynamoServer is the host:port of DynamoDB Local.
func dynamoServer(t *testing.T) string {
	return testenv.HostPort("8000")(testenv.Service(t, "DynamoDB Local", "IDEM_DYNAMODB_ENDPOINT", "http://127.0.0.1:8000", testenv.HostPort("8000")))
}

// TestServeStoreUnreachable: with every kind of store at an address where nothing listens,
// idem serve exits 1 at once with an error that names the store (its password hidden) and
// says how to wait for it; with --wait-for-store it tries until then and exits 1 the same.
// An embedded store that cannot be opened fails the same way.
func TestServeStoreUnreachable(t *testing.T) {
	t.Parallel()
	cases := map[string]string{"sqlite": "sqlite:///proc/no-such-dir/idem.db"}
	for _, k := range storeKinds {
		cases[k.name] = strings.Replace(k.url("127.0.0.1:1", "idem_cli_unreachable"), "postgres@", "postgres:hunter2@", 1)
	}
	for name, store := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			scheme, _, _ := strings.Cut(store, "://")
			args := []string{"serve", "--upstream", "http://127.0.0.1:1", "--scope", "none", "--listen", "127.0.0.1:0", "--store", store}
			start := time.Now()
			code, _, errs := runEnv(t, nil, args...)
			took := time.Since(start)
			if code != 1 || !strings.Contains(errs, "cannot reach the store "+scheme+"://") || !strings.Contains(errs, "--wait-for-store") || took > 20*time.Second {
				t.Errorf("exit %d after %s, stderr:\n%s\nwant exit 1 at once naming the store", code, took, errs)
			}
			if strings.Contains(errs, "hunter2") {
				t.Errorf("the password is in the error:\n%s", errs)
			}
			code, _, errs = runEnv(t, nil, append(args, "--wait-for-store", "4s")...)
			m := triedTimes.FindStringSubmatch(errs)
			if code != 1 || !strings.Contains(errs, "cannot reach the store "+scheme+"://") || m == nil || m[1] == "1" ||
				strings.Count(errs, "store unreachable: trying again") < 1 {
				t.Errorf("--wait-for-store 4s: exit %d, stderr:\n%s\nwant attempts logged, then exit 1 after two or more", code, errs)
			}
		})
	}
}

var triedTimes = regexp.MustCompile(`tried (\d+) times in`)

// gate forwards connections to a server once opened; until then it accepts and closes them at
// once, as a store that is starting up (or a proxy in front of one that is down) does.
type gate struct {
	ln     net.Listener
	target string
	open   atomic.Bool
	mu     sync.Mutex
	conns  []net.Conn
}

func newGate(t *testing.T, target string) *gate { return newGateAt(t, "127.0.0.1:0", target) }

// newGateAt is newGate listening at addr.
func newGateAt(t *testing.T, addr, target string) *gate {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	g := &gate{ln: ln, target: target}
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			if !g.open.Load() {
				in.Close()
				continue
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			g.mu.Lock()
			g.conns = append(g.conns, in, out)
			g.mu.Unlock()
			go func() { _, _ = io.Copy(out, in); out.Close() }()
			go func() { _, _ = io.Copy(in, out); in.Close() }()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		g.mu.Lock()
		defer g.mu.Unlock()
		for _, c := range g.conns {
			c.Close()
		}
	})
	return g
}

// TestServeWaitsForStore: for every kind of network store, a gateway started with
// --wait-for-store while its store does not answer logs its attempts, starts once the store
// answers, and serves requests from it.
func TestServeWaitsForStore(t *testing.T) {
	t.Parallel()
	for _, k := range storeKinds {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			// Dropped after the gate closed (cleanups run last registered first).
			table := newTable("idem_cli_wait")
			k.drop(t, table)
			g := newGate(t, k.server(t))
			var logs syncbuf.Buffer
			log := slog.New(slog.NewTextHandler(&logs, nil))
			cfg := gateway.Config{Upstream: "http://127.0.0.1:1", Store: k.url(g.ln.Addr().String(), table), Scope: gateway.ScopeNone,
				Listen: "127.0.0.1:0", WaitForStore: gateway.Duration(60 * time.Second)}.WithDefaults()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			ready, done := make(chan serveAddrs, 1), make(chan error, 1)
			go func() { done <- serve(ctx, nil, cfg, log, func(s serveAddrs) { ready <- s }) }()
			for start := time.Now(); strings.Count(logs.String(), "store unreachable: trying again") < 2; time.Sleep(20 * time.Millisecond) {
				select {
				case <-ready:
					t.Fatal("the gateway started while its store did not answer")
				case err := <-done:
					t.Fatalf("serve returned while waiting for the store: %v\n%s", err, logs.String())
				default:
				}
				if time.Since(start) > 30*time.Second {
					t.Fatalf("no two attempts logged in 30s:\n%s", logs.String())
				}
			}
			g.open.Store(true)
			select {
			case s := <-ready:
				if !strings.Contains(logs.String(), "store reached") {
					t.Errorf("no line says the store was reached:\n%s", logs.String())
				}
				if code, _, errs := runEnv(t, nil, "inspect", "--store", cfg.Store, "--scope", "none", "never-sent"); code != 1 || !strings.Contains(errs, "no record") {
					t.Errorf("the gateway's store, read by inspect: %d %s (gateway at %s)", code, errs, s.addr)
				}
			case err := <-done:
				t.Fatalf("serve: %v\n%s", err, logs.String())
			case <-time.After(45 * time.Second):
				t.Fatalf("not started 45s after the store opened:\n%s", logs.String())
			}
			cancel()
			if err := <-done; err != nil && !errors.Is(err, idem.ErrStoreUnavailable) {
				t.Errorf("serve after cancel: %v", err)
			}
		})
	}
}

// TestServeClientLinesAfterStart: while idem serve waits for its store, the store client's
// own warnings (go-redis's failed dials, four or five an attempt) are dropped, since each
// "store unreachable" line gives their cause; once the gateway is up they come out again, in
// the gateway's log. Not parallel: the clients' logger is process-wide.
func TestServeClientLinesAfterStart(t *testing.T) {
	redisAddr := testenv.RedisAddr(t)
	// An address where nothing listens until the gate opens there: each attempt's dials are
	// refused, which go-redis logs.
	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := free.Addr().String()
	free.Close()
	var stderr syncbuf.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	args := []string{"serve", "--upstream", "http://127.0.0.1:1", "--scope", "none", "--listen", "127.0.0.1:0",
		"--store", "redis://" + addr + "/0?prefix=idem-cli-lines:", "--wait-for-store", "60s"}
	go func() {
		done <- mainEnv(ctx, args, &env{stdout: io.Discard, stderr: &stderr, getenv: func(string) string { return "" }})
	}()
	waitFor := func(what string, ok func(string) bool, act func()) {
		t.Helper()
		for start := time.Now(); !ok(stderr.String()); time.Sleep(20 * time.Millisecond) {
			select {
			case code := <-done:
				t.Fatalf("serve exited %d while waiting for %s:\n%s", code, what, stderr.String())
			default:
			}
			if time.Since(start) > 30*time.Second {
				t.Fatalf("no %s in 30s:\n%s", what, stderr.String())
			}
			if act != nil {
				act()
			}
		}
	}
	waitFor("two attempts", func(s string) bool { return strings.Count(s, "store unreachable: trying again") >= 2 }, nil)
	if s := stderr.String(); strings.Contains(s, "component=redis") {
		t.Errorf("go-redis's lines logged while waiting for the store:\n%s", s)
	}
	g := newGateAt(t, addr, redisAddr)
	g.open.Store(true)
	waitFor("start", func(s string) bool { return strings.Contains(s, "idem gateway listening") }, nil)
	// A go-redis client's failed dial, as the store's own client would log one.
	dead := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: time.Second})
	defer dead.Close()
	waitFor("go-redis line after the start", func(s string) bool { return strings.Contains(s, "component=redis") },
		func() { _ = dead.Ping(context.Background()).Err() })
	cancel()
	if code := <-done; code != 0 {
		t.Errorf("serve exited %d after cancel:\n%s", code, stderr.String())
	}
}

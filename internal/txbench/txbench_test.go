package txbench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/idemhttp"
)

// backend is one database served both ways.
type backend struct {
	name string
	// bare inserts the row in its own transaction, without idem; tx is the same handler
	// behind idemhttp with the store's TxRunner.
	bare, tx http.Handler
	// trips returns the round trips made to the database so far (client flights: each time
	// the client writes after it has read); nil when the database is in the process.
	trips func() int64
	// rows counts the business rows.
	rows func(ctx context.Context) (int, error)
	// extra is the most round trips per new key that transaction mode may take over the bare
	// handler; TestRoundTrips fails above it (when trips counts them).
	extra int
	// server names the database server's processes, to read their CPU time from /proc when
	// the server runs on this machine; nil when the database is in the process.
	server []string
}

// flights counts a connection's round trips: every write that follows a read (or opens the
// connection) starts one, however many statements it pipelines.
//
// pgx may read on a goroutine of its own while it writes, so writing is atomic.
type flights struct {
	net.Conn
	n       *atomic.Int64
	writing atomic.Bool
}

func (c *flights) Write(b []byte) (int, error) {
	if !c.writing.Swap(true) {
		c.n.Add(1)
	}
	return c.Conn.Write(b)
}

func (c *flights) Read(b []byte) (int, error) {
	c.writing.Store(false)
	return c.Conn.Read(b)
}

func suffix() string {
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// post sends one keyed order; it reports whether the answer was the 201 of a new order.
func post(client *http.Client, url, key string) error {
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"customer":"c1","amount":4200}`))
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated || resp.Header.Get(idemhttp.ReplayedHeader) != "" {
		return fmt.Errorf("POST %s: %s", key, resp.Status)
	}
	return nil
}

// serve starts h on 127.0.0.1 and returns its URL and a client with enough idle connections.
func serve(t testing.TB, h http.Handler, conns int) (string, *http.Client) {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	tr := &http.Transport{MaxIdleConns: conns, MaxIdleConnsPerHost: conns}
	t.Cleanup(tr.CloseIdleConnections)
	return srv.URL + "/orders", &http.Client{Transport: tr}
}

// tripsPerRequest sends n new keys one after the other and returns the database round trips
// per request.
func tripsPerRequest(t *testing.T, b *backend, h http.Handler, n int) float64 {
	t.Helper()
	url, client := serve(t, h, 1)
	prefix := suffix()
	for i := range 20 { // warm up: connections open, statements prepared
		if err := post(client, url, fmt.Sprintf("warm-%s-%d", prefix, i)); err != nil {
			t.Fatal(err)
		}
	}
	before := b.trips()
	for i := range n {
		if err := post(client, url, fmt.Sprintf("rt-%s-%d", prefix, i)); err != nil {
			t.Fatal(err)
		}
	}
	return float64(b.trips()-before) / float64(n)
}

// checkTrips measures the round trips per new key of both handlers, asserts the backend's
// bound on the difference, and that each key made exactly one row.
func checkTrips(t *testing.T, b *backend) (bare, tx float64) {
	t.Helper()
	ctx := context.Background()
	before, err := b.rows(ctx)
	if err != nil {
		t.Fatal(err)
	}
	bare = tripsPerRequest(t, b, b.bare, 200)
	tx = tripsPerRequest(t, b, b.tx, 200)
	t.Logf("%s: %.2f round trips per new key bare, %.2f in transaction mode", b.name, bare, tx)
	// A round trip that transaction mode adds costs one per key, 200 in the run; the pool's
	// own (a liveness ping after a connection sat idle through a stall of a busy machine)
	// come a few per run, in either handler. Up to 10 of those are not counted against it.
	const noise = 10.0 / 200
	if tx > bare+float64(b.extra)+noise {
		t.Errorf("%s: transaction mode takes %.2f round trips per new key, the bare handler %.2f: more than %d extra", b.name, tx, bare, b.extra)
	}
	after, err := b.rows(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if after-before != 2*220 {
		t.Errorf("%s: %d rows for %d requests with new keys", b.name, after-before, 2*220)
	}
	return bare, tx
}

// rate runs conc clients posting new keys to h for d and returns the requests per second and
// the requests answered.
func rate(t *testing.T, url string, client *http.Client, conc int, d time.Duration) (float64, int64) {
	t.Helper()
	prefix := suffix()
	var n atomic.Int64
	var failed atomic.Pointer[error]
	stop := time.Now().Add(d)
	start := time.Now()
	var wg sync.WaitGroup
	for g := range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Now().Before(stop); i++ {
				if err := post(client, url, fmt.Sprintf("%s-%d-%d", prefix, g, i)); err != nil {
					failed.CompareAndSwap(nil, &err)
					return
				}
				n.Add(1)
			}
		}()
	}
	wg.Wait()
	if err := failed.Load(); err != nil {
		t.Fatal(*err)
	}
	return float64(n.Load()) / time.Since(start).Seconds(), n.Load()
}

// round is one handler's run in a round: its rate and its CPU time per request.
type round struct {
	rate float64
	cpu  perRequest
}

// measure runs one handler for d, reading the CPU time of the backend's server and of this
// process around the run.
func measure(t *testing.T, b *backend, url string, client *http.Client, conc int, d time.Duration) round {
	before := readCPU(b.server)
	r, n := rate(t, url, client, conc, d)
	return round{rate: r, cpu: cpuPerRequest(before, readCPU(b.server), n)}
}

// compare alternates the two handlers over rounds and returns each round's run of both.
func compare(t *testing.T, b *backend, rounds, conc int, d time.Duration) (bare, tx []round) {
	t.Helper()
	bareURL, bareClient := serve(t, b.bare, conc)
	txURL, txClient := serve(t, b.tx, conc)
	rate(t, bareURL, bareClient, conc, d/4) // warm up both
	rate(t, txURL, txClient, conc, d/4)
	for r := range rounds {
		var br, tr round
		if r%2 == 0 {
			br = measure(t, b, bareURL, bareClient, conc, d)
			tr = measure(t, b, txURL, txClient, conc, d)
		} else {
			tr = measure(t, b, txURL, txClient, conc, d)
			br = measure(t, b, bareURL, bareClient, conc, d)
		}
		bare, tx = append(bare, br), append(tx, tr)
		t.Logf("%s round %d: bare %.0f req/s, transaction mode %.0f req/s, ratio %.2f", b.name, r+1, br.rate, tr.rate, tr.rate/br.rate)
	}
	return bare, tx
}

// cpuRow is the CPU table's row of one backend: the medians over rounds of each handler's CPU
// time per request, what transaction mode adds and the ratio of the totals.
func cpuRow(name string, bare, tx []round) string {
	med := func(rs []round, server bool) time.Duration {
		var xs []float64
		for _, r := range rs {
			if server {
				xs = append(xs, float64(r.cpu.server))
			} else {
				xs = append(xs, float64(r.cpu.self))
			}
		}
		return time.Duration(median(xs))
	}
	found := true
	for _, r := range append(slices.Clone(bare), tx...) {
		found = found && r.cpu.found
	}
	us := func(d time.Duration) string { return fmt.Sprintf("%d µs", d.Microseconds()) }
	bs, bp, ts, tp := med(bare, true), med(bare, false), med(tx, true), med(tx, false)
	if !found {
		// No local server process (SQLite, or a remote server): the test process alone.
		return fmt.Sprintf("| %s | n/a | %s | n/a | %s | %s | %.2f |\n", name, us(bp), us(tp), us(tp-bp), float64(bp)/float64(tp))
	}
	return fmt.Sprintf("| %s | %s | %s | %s | %s | %s, %s | %.2f |\n", name, us(bs), us(bp), us(ts), us(tp), us(ts-bs), us(tp-bp), float64(bs+bp)/float64(ts+tp))
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// backends are the databases whose TxRunner this package measures; each returns nil (after
// skipping or failing t) when its server is missing.
var backends = []struct {
	name string
	open func(t *testing.T) *backend
}{
	{"PostgreSQL (pgstore)", openPostgres},
	{"MySQL/MariaDB (mysqlstore)", openMySQL},
	{"SQLite (sqlitestore)", openSQLite},
}

// Transaction mode costs at most one database round trip per new key over the handler's own
// transaction on PostgreSQL and two on MySQL/MariaDB (see openMySQL); SQLite has none to count.
func TestRoundTrips(t *testing.T) {
	for _, bk := range backends {
		t.Run(bk.name, func(t *testing.T) {
			b := bk.open(t)
			if b == nil || b.trips == nil {
				return
			}
			checkTrips(t, b)
		})
	}
}

// The request rates of both handlers, alternating, over rounds; with IDEM_TX_BENCH set to a
// file name it writes the Markdown report there (docs/bench/transactions.md).
func TestRates(t *testing.T) {
	out := os.Getenv("IDEM_TX_BENCH")
	if out == "" {
		t.Skip("IDEM_TX_BENCH is not set: set it to the report's file (or - for the test log) to compare the rates")
	}
	const rounds, conc, d = 10, 16, 2 * time.Second
	var md strings.Builder
	fmt.Fprintf(&md, "# Transaction mode over HTTP\n\n")
	fmt.Fprintf(&md, "A keyed `POST /orders` over net/http on 127.0.0.1 that inserts one row (`INSERT … RETURNING id`) and answers 201,\n")
	fmt.Fprintf(&md, "every request with a new `Idempotency-Key`: idemhttp with the store's TxRunner (claim, insert and\n")
	fmt.Fprintf(&md, "stored response in one transaction), against the same handler doing its insert in its own transaction\n")
	fmt.Fprintf(&md, "without idem. %d clients, %d rounds of %s per handler, the two alternating in one run; ratio = transaction\n", conc, rounds, d)
	fmt.Fprintf(&md, "mode ÷ bare. Round trips are counted on the database connections (each write that follows a read\n")
	fmt.Fprintf(&md, "starts one, however many statements it pipelines), over 200 sequential requests after a warm-up.\n\n")
	fmt.Fprintf(&md, "Measured %s on %d CPUs, load average %s at the start.\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"), runtime.NumCPU(), loadavg())
	fmt.Fprintf(&md, "Command: `IDEM_TX_BENCH=docs/bench/transactions.md go test -count=1 -run 'TestRates' -v ./internal/txbench/`.\n\n")
	fmt.Fprintf(&md, "| backend | round trips per new key: bare | transaction mode | bare req/s (median) | transaction mode req/s (median) | ratio per round | median ratio |\n")
	fmt.Fprintf(&md, "| --- | --- | --- | --- | --- | --- | --- |\n")
	var cpu strings.Builder
	for _, bk := range backends {
		t.Run(bk.name, func(t *testing.T) {
			b := bk.open(t)
			if b == nil {
				return
			}
			trips := "n/a (in process)"
			var bareTrips, txTrips float64
			if b.trips != nil {
				bareTrips, txTrips = checkTrips(t, b)
			}
			bare, tx := compare(t, b, rounds, conc, d)
			var rs []string
			var ratios, br, tr []float64
			for i := range bare {
				ratios = append(ratios, tx[i].rate/bare[i].rate)
				br, tr = append(br, bare[i].rate), append(tr, tx[i].rate)
				rs = append(rs, fmt.Sprintf("%.2f", ratios[i]))
			}
			if b.trips != nil {
				fmt.Fprintf(&md, "| %s | %.2f | %.2f | %.0f | %.0f | %s | **%.2f** |\n", b.name, bareTrips, txTrips, median(br), median(tr), strings.Join(rs, " "), median(ratios))
			} else {
				fmt.Fprintf(&md, "| %s | %s | %s | %.0f | %.0f | %s | **%.2f** |\n", b.name, trips, trips, median(br), median(tr), strings.Join(rs, " "), median(ratios))
			}
			cpu.WriteString(cpuRow(b.name, bare, tx))
		})
	}
	fmt.Fprintf(&md, "\nCPU time per request, median over the rounds: the database server's (every process of the local\n")
	fmt.Fprintf(&md, "server, read from /proc: another client's work on a shared server counts too) and the test process's\n")
	fmt.Fprintf(&md, "(HTTP server and clients, driver, idem). SQLite runs in the test process. Both handlers share the 2\n")
	fmt.Fprintf(&md, "cores with the server, so when the cores are the limit the rate ratio follows the CPU ratio (bare\n")
	fmt.Fprintf(&md, "total ÷ transaction mode total), whatever the round's noise: it is the ceiling the rates approach.\n\n")
	fmt.Fprintf(&md, "| backend | bare: database | bare: test process | transaction mode: database | transaction mode: test process | added per new key: database, test process | CPU ratio |\n")
	fmt.Fprintf(&md, "| --- | ---: | ---: | ---: | ---: | --- | ---: |\n")
	md.WriteString(cpu.String())
	fmt.Fprintf(&md, "\nOn PostgreSQL a new key in transaction mode takes one pipelined batch (BEGIN, lock_timeout set for the\n")
	fmt.Fprintf(&md, "claim, the claim, the setting given back); the handler's INSERT; and one pipelined batch (the completion and\n")
	fmt.Fprintf(&md, "COMMIT): the same three round trips as the bare handler's BEGIN, INSERT, COMMIT.\n\n")
	fmt.Fprintf(&md, "On MySQL/MariaDB it takes START TRANSACTION; the claim, one INSERT (on MariaDB the TxRunner's bound on\n")
	fmt.Fprintf(&md, "the lock wait is inside it: `SET STATEMENT innodb_lock_wait_timeout = n FOR INSERT …`); the handler's\n")
	fmt.Fprintf(&md, "INSERT (prepare and execute: two round trips, as in the bare handler); the completion, one UPDATE; and\n")
	fmt.Fprintf(&md, "COMMIT: two round trips more than the bare handler's START TRANSACTION, INSERT, COMMIT. go-sql-driver\n")
	fmt.Fprintf(&md, "sends START TRANSACTION and COMMIT of a `*sql.Tx` on their own and does not pipeline, and the claim\n")
	fmt.Fprintf(&md, "must precede the handler and the completion follow it, so neither can share a round trip: two is the\n")
	fmt.Fprintf(&md, "least for a handler given a `*sql.Tx`. The transaction runs at the session's isolation level, as the\n")
	fmt.Fprintf(&md, "bare handler's does.\n\n")
	fmt.Fprintf(&md, "`TestRoundTrips` asserts both counts on every run. SQLite runs in the process, so it has no round\n")
	fmt.Fprintf(&md, "trips to count: its transaction holds SQLite's single write lock from the claim to COMMIT, across the\n")
	fmt.Fprintf(&md, "handler, where the bare handler holds it for its INSERT alone, and writes the record's row and index\n")
	fmt.Fprintf(&md, "entries beside the order's; its rate is bound by that lock more than by the cores.\n\n")
	fmt.Fprintf(&md, "The rest of the gap is work, and the CPU table says where: on the database, the record's two\n")
	fmt.Fprintf(&md, "statements (the claim's INSERT, with its row and two index entries, and the completing UPDATE), each\n")
	fmt.Fprintf(&md, "with the server's fixed cost of a statement, beside a bare handler whose whole transaction is one\n")
	fmt.Fprintf(&md, "small INSERT; in the test process, idemhttp's work on the request and the captured response and the\n")
	fmt.Fprintf(&md, "driver's work on two more statements. What transaction mode adds per request is a fixed cost: the\n")
	fmt.Fprintf(&md, "more a handler does, the nearer its ratio comes to 1. On a shared machine single rounds swing widely\n")
	fmt.Fprintf(&md, "(see the load average above): read the median, and the CPU ratio beside it.\n")
	if out == "-" {
		t.Log("\n" + md.String())
		return
	}
	if !filepath.IsAbs(out) {
		out = filepath.Join("..", "..", out) // relative to the module's root, where the command runs
	}
	if err := os.WriteFile(out, []byte(md.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}

// order is the request body.
type order struct {
	Customer string `json:"customer"`
	Amount   int64  `json:"amount"`
}

// decode reads the order, or answers 400 and reports false.
func decode(w http.ResponseWriter, r *http.Request) (order, bool) {
	var in order
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.Customer == "" || in.Amount <= 0 {
		http.Error(w, `want {"customer": ..., "amount": > 0}`, http.StatusBadRequest)
		return in, false
	}
	return in, true
}

// created answers 201 with the new order.
func created(w http.ResponseWriter, id int64, in order) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, `{"order":%d,"customer":%q,"amount":%d}`, id, in.Customer, in.Amount)
}

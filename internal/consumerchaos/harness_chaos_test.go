//go:build chaos

package consumerchaos_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/internal/chaos/faultproxy"
	"github.com/idemkit/idem/internal/consumerchaos"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/store/pgstore"
)

func TestMain(m *testing.M) {
	if os.Getenv(workerEnv) == "1" {
		os.Exit(workerMain())
	}
	if os.Getenv(relayEnv) == "1" {
		os.Exit(relayMain())
	}
	os.Exit(m.Run())
}

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

func envList(name, def string) []string {
	v := os.Getenv(name)
	if v == "" {
		v = def
	}
	return strings.Split(v, ",")
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

var newBroker = map[string]func(*testing.T, string) broker{"nats": newNATS, "amqp": newAMQP, "redis": newRedis, "sqs": newSQS}

// TestConsumerChaos runs every broker in every mode under every fault; each verdict must be
// all zeros.
func TestConsumerChaos(t *testing.T) {
	facts := envInt("IDEM_CCHAOS_FACTS", 200)
	for _, b := range envList("IDEM_CCHAOS_BROKERS", "nats,amqp,redis,sqs") {
		for _, mode := range envList("IDEM_CCHAOS_MODES", "tx,engine") {
			t.Run(b+"/"+mode, func(t *testing.T) {
				v := runChaos(t, config{broker: b, mode: consumerchaos.Mode(mode), facts: facts}, nil)
				if !v.OK() {
					t.Fatal("the verdict is not all zeros")
				}
				if v.Kills["random"] == 0 || v.Pauses == 0 || v.Cuts["store"] == 0 || v.Cuts["broker"] == 0 {
					t.Fatalf("the run injected too few faults to test anything: kills %v, pauses %d, cuts %v", v.Kills, v.Pauses, v.Cuts)
				}
			})
		}
	}
}

// TestConsumerChaosCatchesPlantedBugs runs consumers with a planted bug under the same faults:
// the verdict must fail, with the count the bug breaks.
func TestConsumerChaosCatchesPlantedBugs(t *testing.T) {
	facts := envInt("IDEM_CCHAOS_SELFTEST_FACTS", 150)
	for _, tc := range []struct {
		name, broker, bug string
		mode              consumerchaos.Mode
		broken            func(consumerchaos.Verdict) int
	}{
		// Acking a message before its effect is stored loses the facts whose handler then
		// fails or whose worker dies.
		{"ack-before-complete/nats", "nats", "ackfirst", consumerchaos.Tx, func(v consumerchaos.Verdict) int { return v.Lost }},
		{"ack-before-complete/amqp", "amqp", "ackfirst", consumerchaos.Engine, func(v consumerchaos.Verdict) int { return v.Lost }},
		// A store that loses the consumer's scope (here: each worker its own) runs a fact's
		// second copy again when another worker gets it.
		{"scope-dropped/amqp", "amqp", "scope", consumerchaos.Tx, func(v consumerchaos.Verdict) int { return v.UnexplainedDoubles }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := runChaos(t, config{broker: tc.broker, mode: tc.mode, facts: facts, bug: tc.bug}, nil)
			if v.OK() || tc.broken(v) == 0 {
				t.Fatalf("the planted bug %q went unnoticed", tc.bug)
			}
		})
	}
}

type config struct {
	broker string
	mode   consumerchaos.Mode
	facts  int
	bug    string
	// source is "" (the harness publishes to the broker) or "outbox" (producers write to an
	// outbox table, relay processes publish).
	source string
}

// run is one chaos run: its tables, relays, workers and history.
type run struct {
	t          *testing.T
	cfg        config
	id         string
	outbox     string // the outbox source's tables
	payments   string
	b          broker
	pgURL      string
	db         *pgxpool.Pool
	store      string
	effects    string
	storeRelay *faultproxy.Proxy
	busRelay   *faultproxy.Proxy
	exe, dir   string

	mu     sync.Mutex
	hist   consumerchaos.History
	procs  map[int]*proc // live workers by slot
	strays []string      // unexpected worker exits
}

type proc struct {
	name string
	cmd  *exec.Cmd
}

// runChaos runs one chaos run and judges it; seen, if set, is shown the history.
func runChaos(t *testing.T, cfg config, seen func(consumerchaos.History)) consumerchaos.Verdict {
	pgURL := testenv.PostgresURL(t)
	if pgURL == "" {
		t.Skip("no PostgreSQL")
	}
	id := randHex(5)
	b := newBroker[cfg.broker](t, id)
	if b == nil {
		t.Skip("no " + cfg.broker)
	}
	ctx := context.Background()
	db, err := pgxpool.New(ctx, pgURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	r := &run{t: t, cfg: cfg, id: id, b: b, pgURL: pgURL, db: db, store: "cchaos_idem_" + id, effects: "cchaos_effects_" + id,
		dir: t.TempDir(), procs: map[int]*proc{}}
	r.hist.Mode, r.hist.Lease = cfg.mode, engineLease
	if _, err := db.Exec(ctx, "CREATE TABLE "+r.effects+" (id bigserial PRIMARY KEY, fact text NOT NULL, worker text NOT NULL, at timestamptz NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = db.Exec(context.Background(), "DROP TABLE IF EXISTS "+r.effects+", "+r.store) })
	st, err := pgstore.New(db, pgstore.Options{Table: r.store})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if r.exe, err = os.Executable(); err != nil {
		t.Fatal(err)
	}
	// The relays: the store's drops a few requests and answers besides the cuts; the broker's
	// only cuts (its protocols are not request then answer).
	if r.storeRelay, err = faultproxy.New(faultproxy.Options{Target: hostPort(pgURL, "5432"),
		Faults: faultproxy.Faults{DropRequest: 0.001, DropResponse: 0.001}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.storeRelay.Close() })
	if r.busRelay, err = faultproxy.New(faultproxy.Options{Target: b.Addr()}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.busRelay.Close() })

	start := time.Now()
	const workers = 3
	stop := make(chan struct{})
	wg := r.supervise(workers, false, stop)
	pubDone := make(chan struct{})
	stopRelays := make(chan struct{})
	if cfg.source == "outbox" {
		r.setupOutbox(ctx)
		rwg := r.superviseRelays(relays, stopRelays)
		defer rwg.Wait()
		defer close(stopRelays) // after drain: then nothing is left unsent
		go func() { defer close(pubDone); r.produce() }()
	} else {
		go func() { defer close(pubDone); r.publish() }()
	}
	r.faults(pubDone)
	// Calm: the faulty workers stop, calm ones drain what is left.
	close(stop)
	wg.Wait()
	_ = r.storeRelay.SetFaults(faultproxy.Faults{})
	r.drain(workers)
	h := r.history()
	if dir := os.Getenv("IDEM_CCHAOS_HISTORY"); dir != "" {
		// The whole history, to judge it again.
		b, _ := json.Marshal(h)
		name := filepath.Join(dir, fmt.Sprintf("cchaos-%s-%s-%s.json", cfg.broker, cfg.mode, id))
		if err := os.WriteFile(name, b, 0o644); err != nil {
			t.Error(err)
		}
		t.Logf("history written to %s", name)
	}
	if seen != nil {
		seen(h)
	}
	v := consumerchaos.Judge(h)
	var buf bytes.Buffer
	v.Report(&buf)
	t.Logf("%s, %s mode, %d facts, bug %q, %s:\n%s", cfg.broker, cfg.mode, cfg.facts, cfg.bug, time.Since(start).Round(time.Second), buf.String())
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.strays {
		t.Errorf("worker exited on its own: %s", s)
	}
	return v
}

// publish publishes the facts at about 40 a second; about a third of them are published a
// second time, with a new message id, a little later.
func (r *run) publish() {
	ctx := context.Background()
	type msg struct {
		f    fact
		copy int
		pos  float64
	}
	var seq []msg
	for i := range r.cfg.facts {
		f := fact{Fact: fmt.Sprintf("f%05d", i), Amount: 100 + i}
		seq = append(seq, msg{f: f, pos: float64(i)})
		if mrand.Float64() < 0.33 {
			seq = append(seq, msg{f: f, copy: 1, pos: float64(i+1+mrand.IntN(40)) + 0.5})
		}
	}
	sort.Slice(seq, func(a, b int) bool { return seq[a].pos < seq[b].pos })
	facts := map[string]bool{}
	for _, m := range seq {
		f := m.f
		f.Copy, f.Sent = m.copy, time.Now().UnixNano()
		body, _ := json.Marshal(f)
		var err error
		for try := 0; try < 5; try++ {
			if err = r.b.Publish(ctx, body, randHex(8)); err == nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			r.t.Errorf("publish %s: %v", f.Fact, err)
			continue
		}
		r.mu.Lock()
		if !facts[f.Fact] {
			facts[f.Fact] = true
			r.hist.Facts = append(r.hist.Facts, f.Fact)
		}
		r.hist.Messages++
		r.mu.Unlock()
		time.Sleep(25 * time.Millisecond)
	}
}

// faults injects faults at random until publishing is done and a little after.
func (r *run) faults(pubDone <-chan struct{}) {
	var end <-chan time.Time
	var pauses sync.WaitGroup
	defer pauses.Wait()
	paused := false
	var pmu sync.Mutex
	first := []float64{0.1, 0.4, 0.6, 0.9} // kill, pause, store cut, broker cut
	mrand.Shuffle(len(first), func(i, j int) { first[i], first[j] = first[j], first[i] })
	for {
		select {
		case <-pubDone:
			pubDone, end = nil, time.After(3*time.Second)
		case <-end:
			return
		case <-time.After(time.Duration(300+mrand.IntN(600)) * time.Millisecond):
		}
		x := mrand.Float64()
		if len(first) > 0 { // each class once first, so that every run has every fault
			x, first = first[0], first[1:]
		}
		switch {
		case x < 0.3:
			if p := r.pick(); p != nil {
				r.mu.Lock()
				r.hist.Kills = append(r.hist.Kills, consumerchaos.Kill{Worker: p.name, At: time.Now(), Where: "random"})
				r.mu.Unlock()
				_ = p.cmd.Process.Signal(syscall.SIGKILL)
			}
		case x < 0.5:
			pmu.Lock()
			busy := paused
			pmu.Unlock()
			p := r.pick()
			if busy || p == nil {
				continue
			}
			pmu.Lock()
			paused = true
			pmu.Unlock()
			pauses.Add(1)
			go func() {
				defer pauses.Done()
				from := time.Now()
				_ = p.cmd.Process.Signal(syscall.SIGSTOP)
				time.Sleep(engineLease + time.Duration(300+mrand.IntN(1200))*time.Millisecond)
				to := time.Now() // before the signal: the worker may act before this goroutine runs again
				_ = p.cmd.Process.Signal(syscall.SIGCONT)
				r.mu.Lock()
				r.hist.Pauses = append(r.hist.Pauses, consumerchaos.Pause{Worker: p.name, From: from, To: to})
				r.mu.Unlock()
				pmu.Lock()
				paused = false
				pmu.Unlock()
			}()
		case x < 0.75:
			at := time.Now()
			r.storeRelay.CutAll()
			r.mu.Lock()
			r.hist.Cuts = append(r.hist.Cuts, consumerchaos.Cut{At: at, What: "store"})
			r.mu.Unlock()
		default:
			at := time.Now()
			r.busRelay.CutAll()
			r.mu.Lock()
			r.hist.Cuts = append(r.hist.Cuts, consumerchaos.Cut{At: at, What: "broker"})
			r.mu.Unlock()
		}
	}
}

func (r *run) pick() *proc {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ps []*proc
	for _, p := range r.procs {
		ps = append(ps, p)
	}
	if len(ps) == 0 {
		return nil
	}
	return ps[mrand.IntN(len(ps))]
}

// drain runs calm workers until every fact has an effect and the broker holds nothing, then
// stops them; whatever they held when stopped is drained again, a few rounds at most.
func (r *run) drain(workers int) {
	ctx := context.Background()
	for round := 0; round < 6; round++ {
		stop := make(chan struct{})
		wg := r.supervise(workers, true, stop)
		deadline := time.Now().Add(60 * time.Second)
		// Done when the broker holds nothing and every fact has its effect, or, for facts a
		// buggy consumer lost, when nothing has changed for a few seconds.
		quiet, still, last := 0, 0, -1
		for time.Now().Before(deadline) && quiet < 3 && still < 10 {
			time.Sleep(300 * time.Millisecond)
			n, err := r.b.Pending(ctx)
			if r.cfg.source == "outbox" && err == nil {
				n += r.unsent(ctx) // the relays have more to publish
			}
			var done int
			if qerr := r.db.QueryRow(ctx, "SELECT count(DISTINCT fact) FROM "+r.effects).Scan(&done); qerr != nil {
				r.t.Fatal(qerr)
			}
			r.mu.Lock()
			all := done >= len(r.hist.Facts)
			r.mu.Unlock()
			switch {
			case err != nil || n > 0:
				quiet, still = 0, 0
			case all:
				quiet++
			case done == last:
				still++
			default:
				still = 0
			}
			last = done
		}
		close(stop)
		wg.Wait()
		// JetStream counts what a stopped worker held as pending until its ack wait has run
		// out; the other brokers count it at once (RabbitMQ once the connection is closed).
		if r.cfg.broker == "nats" {
			time.Sleep(natsAckWait + 500*time.Millisecond)
		} else {
			time.Sleep(300 * time.Millisecond)
		}
		n, err := r.b.Pending(ctx)
		if err != nil {
			r.t.Fatal(err)
		}
		r.mu.Lock()
		r.hist.Undrained = n
		r.mu.Unlock()
		if n == 0 {
			return
		}
	}
}

// supervise keeps n workers running, starting another in a slot whose worker died, until
// stop is closed; then it resumes and stops them (SIGTERM) and waits.
func (r *run) supervise(n int, calm bool, stop chan struct{}) *sync.WaitGroup {
	var wg sync.WaitGroup
	for slot := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for inc := 0; ; inc++ {
				name := fmt.Sprintf("w%d.%d", slot, inc)
				if calm {
					name = fmt.Sprintf("calm%d.%d.%s", slot, inc, randHex(2))
				}
				if !r.worker(slot, name, calm, stop) {
					return
				}
			}
		}()
	}
	return &wg
}

// worker runs one worker process until it dies (true: start another) or stop is closed
// (false).
func (r *run) worker(slot int, name string, calm bool, stop chan struct{}) bool {
	env := map[string]string{
		"NAME": name, "BROKER": r.cfg.broker, "BROKER_URL": r.b.URL(r.busRelay.Addr()), "TARGET": r.b.Target(),
		"PG": withHost(r.pgURL, r.storeRelay.Addr()), "PG_DIRECT": r.pgURL, "STORE": r.store, "EFFECTS": r.effects,
		"MODE": string(r.cfg.mode), "BUG": r.cfg.bug, "CALM": strconv.Itoa(b2i(calm)), "SOURCE": r.cfg.source,
	}
	return r.process(slot, name, workerEnv, env, stop)
}

// process runs the test binary again as a worker or a relay (role: the environment variable
// that makes it one) in slot, until it dies (true: start another) or stop is closed (false).
func (r *run) process(slot int, name, role string, env map[string]string, stop chan struct{}) bool {
	cmd := exec.Command(r.exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), role+"=1")
	for k, v := range env {
		cmd.Env = append(cmd.Env, "IDEM_CCHAOS_"+k+"="+v)
	}
	out := &lineLog{r: r, worker: name}
	cmd.Stdout = out
	errPath := filepath.Join(r.dir, name+".stderr")
	errFile, err := os.Create(errPath)
	if err != nil {
		r.t.Error(err)
		return false
	}
	defer errFile.Close()
	cmd.Stderr = errFile
	if err := cmd.Start(); err != nil {
		r.t.Error(err)
		return false
	}
	p := &proc{name: name, cmd: cmd}
	r.mu.Lock()
	r.procs[slot] = p
	r.mu.Unlock()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	forget := func() {
		r.mu.Lock()
		if r.procs[slot] == p {
			delete(r.procs, slot)
		}
		r.mu.Unlock()
	}
	select {
	case err := <-exited:
		forget()
		var ee *exec.ExitError
		if errors.As(err, &ee) && ee.Sys().(syscall.WaitStatus).Signal() == syscall.SIGKILL {
			return true
		}
		r.stray(name, err, errPath)
		return true
	case <-stop:
		forget()
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Signal(syscall.SIGTERM)
		var err error
		select {
		case err = <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			err = fmt.Errorf("did not stop within 30s of SIGTERM: %w", <-exited)
		}
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			switch ee.Sys().(syscall.WaitStatus).Signal() {
			case syscall.SIGTERM, syscall.SIGKILL: // stopped while starting, or killed itself just then
				err = nil
			}
		}
		if err != nil {
			r.stray(name, err, errPath)
		}
		return false
	}
}

func (r *run) stray(name string, err error, errPath string) {
	tail, _ := os.ReadFile(errPath)
	if len(tail) > 2000 {
		tail = tail[len(tail)-2000:]
	}
	r.mu.Lock()
	r.strays = append(r.strays, fmt.Sprintf("%s: %v: %s", name, err, tail))
	r.mu.Unlock()
}

// history reads the effects table into the run's history and returns it.
func (r *run) history() consumerchaos.History {
	rows, err := r.db.Query(context.Background(), "SELECT fact, worker, at FROM "+r.effects+" ORDER BY id")
	if err != nil {
		r.t.Fatal(err)
	}
	defer rows.Close()
	var es []consumerchaos.Effect
	for rows.Next() {
		var e consumerchaos.Effect
		if err := rows.Scan(&e.Fact, &e.Worker, &e.At); err != nil {
			r.t.Fatal(err)
		}
		es = append(es, e)
	}
	if err := rows.Err(); err != nil {
		r.t.Fatal(err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	h := r.hist
	h.Effects = es
	return h
}

// lineLog parses a worker's stdout into the run's history.
type lineLog struct {
	r      *run
	worker string
	buf    []byte
}

func (l *lineLog) Write(p []byte) (int, error) {
	l.buf = append(l.buf, p...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			break
		}
		l.line(string(l.buf[:i]))
		l.buf = l.buf[i+1:]
	}
	return len(p), nil
}

func (l *lineLog) line(s string) {
	f := strings.Fields(s)
	at := func(s string) time.Time {
		n, _ := strconv.ParseInt(s, 10, 64)
		return time.Unix(0, n)
	}
	l.r.mu.Lock()
	defer l.r.mu.Unlock()
	switch {
	case len(f) == 6 && f[0] == "D":
		l.r.hist.Deliveries = append(l.r.hist.Deliveries, consumerchaos.Delivery{Fact: f[1], Worker: l.worker, Outcome: f[2],
			Unstored: f[3] == "1", Takeover: f[4] == "1", At: at(f[5])})
	case len(f) == 3 && f[0] == "P": // a relay's publish the broker accepted
		l.r.hist.Messages++
	case len(f) == 3 && f[0] == "K":
		l.r.hist.Kills = append(l.r.hist.Kills, consumerchaos.Kill{Worker: l.worker, Where: f[1], At: at(f[2])})
	}
}

// TestRejudge judges again the histories a run wrote (IDEM_CCHAOS_HISTORY), given as a glob
// in IDEM_CCHAOS_REJUDGE, with the verdict as it is now.
func TestRejudge(t *testing.T) {
	pattern := os.Getenv("IDEM_CCHAOS_REJUDGE")
	if pattern == "" {
		t.Skip("IDEM_CCHAOS_REJUDGE names no histories")
	}
	files, err := filepath.Glob(pattern)
	if err != nil || len(files) == 0 {
		t.Fatalf("no history matches %q: %v", pattern, err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var h consumerchaos.History
		if err := json.Unmarshal(b, &h); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		v := consumerchaos.Judge(h)
		var buf bytes.Buffer
		v.Report(&buf)
		t.Logf("%s:\n%s", f, buf.String())
		if !v.OK() {
			t.Errorf("%s: the verdict is not all zeros", f)
		}
	}
}

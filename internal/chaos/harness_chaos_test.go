//go:build chaos

package chaos_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/internal/chaos"
	"github.com/idemkit/idem/internal/chaos/faultproxy"
)

// ---- the upstream: records every execution in PostgreSQL ----

// upstream is a payments-like API that is NOT idempotent: every request that reaches it
// inserts a row, then answers with that row's id. A double execution is a second row.
type upstream struct {
	pool    *pgxpool.Pool
	table   string
	seq     atomic.Int64
	run     string
	srv     *http.Server
	addr    string
	refused atomic.Int64 // 503s answered before acting
	calm    atomic.Bool  // no more injected faults (the probe phase)
	failed  atomic.Int64 // inserts that failed (500, nothing done)
	// lease and timeout are the gateways' lease and upstream timeout, for planLease and
	// planSlow; onLost hears of every answer this upstream cuts short or sends too late.
	lease, timeout time.Duration
	onLost         func(chaos.LostAnswer)
	planned        sync.Map // op → struct{}: its plan was applied (to its first execution)
	injected       sync.Map // plan → *atomic.Int64
	// onFence hears of every execution of an aimed operation (planFenceComplete,
	// planFenceExtend, planDrain) as it is recorded, before the upstream takes fenceEffect (or
	// drainEffect) to answer.
	onFence func(op, gateway string)

	mu  sync.Mutex
	rng *rand.Rand
}

func (u *upstream) roll() float64 {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.rng.Float64()
}

// plan returns the fault to apply to this execution of op: its plan, the first time.
func (u *upstream) plan(op string) string {
	p := planOf(op)
	if p == planNone || u.calm.Load() {
		return planNone
	}
	if _, seen := u.planned.LoadOrStore(op, struct{}{}); seen {
		return planNone
	}
	n, _ := u.injected.LoadOrStore(p, new(atomic.Int64))
	n.(*atomic.Int64).Add(1)
	return p
}

func (u *upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// /<gateway>/ops/<op>
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	if r.Method != http.MethodPost || len(parts) != 3 || parts[1] != "ops" {
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	// The operation is the caller's: the same key and path from two tenants are two
	// operations.
	tenant := r.Header.Get(tenantHeader)
	gw, op := parts[0], opID(tenant, parts[2])
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return // the gateway went away while sending: nothing done
	}
	if !u.calm.Load() && u.roll() < 0.02 {
		u.refused.Add(1)
		http.Error(w, "busy, nothing done", http.StatusServiceUnavailable)
		return
	}
	time.Sleep(time.Duration(u.roll() * float64(15*time.Millisecond)))
	answer, ok := u.act(w, gw, tenant, op, body)
	if !ok {
		return
	}
	switch p := planOf(op); p {
	case planFenceComplete, planFenceExtend:
		u.onFence(op, gw)
		time.Sleep(fenceEffect)
	case planDrain:
		u.onFence(op, gw)
		time.Sleep(drainEffect)
	case planSlowEffect:
		time.Sleep(slowEffectMin + time.Duration(u.roll()*float64(slowEffectMax-slowEffectMin)))
	}
	u.answer(w, gw, op, answer)
}

// act records one execution and returns the answer to send for it.
func (u *upstream) act(w http.ResponseWriter, gw, tenant, op string, body []byte) (string, bool) {
	var in struct {
		Amount int64 `json:"amount"`
	}
	_ = json.Unmarshal(body, &in)
	id := fmt.Sprintf("%s-e%d", u.run, u.seq.Add(1))
	pad := ""
	if planOf(op) == planBig {
		pad = strings.Repeat("x", bigAnswerPad)
	}
	answer := fmt.Sprintf(`{"op":%q,"tenant":%q,"effect":%q,"gateway":%q,"amount":%d,"pad":%q}`+"\n", op, tenant, id, gw, in.Amount, pad)
	// The effect is committed before the answer is written: from here on, a lost answer means
	// the upstream acted.
	_, err := u.pool.Exec(context.Background(), `INSERT INTO `+u.table+` (op, effect, gateway, tenant, at, body) VALUES ($1, $2, $3, $4, $5, $6)`,
		op, id, gw, tenant, time.Now(), []byte(answer))
	if err != nil {
		u.failed.Add(1)
		http.Error(w, "effect not recorded", http.StatusInternalServerError)
		return "", false
	}
	return answer, true
}

// answer sends answer for an execution of op forwarded by gateway gw, as its plan says.
func (u *upstream) answer(w http.ResponseWriter, gw, op, answer string) {
	lost := func(cause string) { u.onLost(chaos.LostAnswer{Op: op, Gateway: gw, At: time.Now(), Cause: cause}) }
	switch u.plan(op) {
	case planCut:
		lost("cut mid-body")
		cutAnswer(w, answer)
		return
	case planChunk:
		lost("chunked answer cut short")
		cutChunked(w, answer)
		return
	case planSlow:
		lost("slower than the upstream timeout")
		time.Sleep(u.timeout + time.Second)
	case planLease:
		time.Sleep(u.lease + time.Second)
	case planFenceComplete, planFenceExtend, planSlowEffect, planDrain:
		// Slow on every execution, above.
	default:
		time.Sleep(time.Duration(u.roll() * float64(5*time.Millisecond)))
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", "/ops/"+op)
	w.WriteHeader(http.StatusCreated)
	_, _ = io.WriteString(w, answer)
}

func startUpstream(t *testing.T, pgURL, run string, seed uint64, lease, timeout time.Duration, onLost func(chaos.LostAnswer)) *upstream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, pgURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	u := &upstream{pool: pool, table: "chaos_effects_" + run, run: run, rng: rand.New(rand.NewPCG(seed, 1)),
		lease: lease, timeout: timeout, onLost: onLost}
	if _, err := pool.Exec(ctx, `CREATE TABLE `+u.table+` (id bigserial PRIMARY KEY, op text NOT NULL, effect text NOT NULL UNIQUE, gateway text NOT NULL, tenant text NOT NULL, at timestamptz NOT NULL, body bytea NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	if os.Getenv("IDEM_CHAOS_KEEP") == "" {
		t.Cleanup(func() { _, _ = pool.Exec(context.Background(), `DROP TABLE IF EXISTS `+u.table) })
	} else {
		t.Logf("effect table kept: %s", u.table)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u.addr = ln.Addr().String()
	u.srv = &http.Server{Handler: u, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = u.srv.Serve(ln) }()
	t.Cleanup(func() { _ = u.srv.Close() })
	return u
}

func (u *upstream) effects(t *testing.T) []chaos.Effect {
	t.Helper()
	rows, err := u.pool.Query(context.Background(), `SELECT op, effect, gateway, tenant, at, body FROM `+u.table+` ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []chaos.Effect
	for rows.Next() {
		var e chaos.Effect
		if err := rows.Scan(&e.Op, &e.ID, &e.Gateway, &e.Tenant, &e.At, &e.Body); err != nil {
			t.Fatal(err)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// ---- the gateways ----

// slot is one gateway position: a fixed listen port, a fault proxy in front of it for the
// clients, and a fault proxy behind it to the upstream. Its process is killed and restarted;
// each incarnation has its own name, which it puts in the upstream path so every effect says
// which process forwarded it.
type slot struct {
	h      *harness
	i      int
	port   int
	front  *faultproxy.Proxy // clients → gateway
	back   *faultproxy.Proxy // gateway → upstream
	relay  *storeRelay       // gateway → store (nil for a store file)
	inc    int
	name   string
	p      proc
	up     atomic.Bool
	paused atomic.Bool
	// busy marks a gateway a fault is aimed through (its store link held back): it serves,
	// but no other fault picks it meanwhile.
	busy   atomic.Bool
	starts int
}

var (
	headPath   = regexp.MustCompile(`^POST /([^/ ]+)/ops/([^/ ]+) HTTP/`)
	headTenant = regexp.MustCompile(`(?im)^` + tenantHeader + `:\s*(\S+)`)
)

func (s *slot) start(ctx context.Context) error {
	for {
		s.inc++
		s.name = fmt.Sprintf("g%di%d", s.i, s.inc)
		logf, err := os.Create(filepath.Join(s.h.dir, s.name+".log"))
		if err != nil {
			return err
		}
		storeURL := s.h.storeURL
		if s.relay != nil {
			storeURL = viaRelay(storeURL, s.relay.Addr())
		}
		args := []string{"serve",
			"--listen", fmt.Sprintf("127.0.0.1:%d", s.port),
			"--upstream", "http://" + s.back.Addr() + "/" + s.name,
			"--store", storeURL,
			"--lease", s.h.lease.String(), "--wait", "1s",
			"--upstream-timeout", upstreamTimeout.String(), "--max-body", "32KiB", "--log-format", "json",
			"--shutdown-timeout", shutdownTimeout.String(), "--scope-header", tenantHeader}
		cmd := exec.Command(s.h.binary, args...)
		cmd.Env = append(os.Environ(), "IDEM_CONFIG=", "IDEM_SCOPE_SECRET="+scopeSecret)
		cmd.Stdout, cmd.Stderr = logf, logf
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := s.p.start(cmd); err != nil {
			logf.Close()
			return err
		}
		s.starts++
		err = s.ready(ctx)
		logf.Close() // the child holds its own descriptor
		if err == nil {
			s.up.Store(true)
			return nil
		}
		_ = s.p.signal(syscall.SIGKILL, 5*time.Second)
		if ctx.Err() != nil {
			return fmt.Errorf("gateway %s: %w (last: %v)", s.name, ctx.Err(), err)
		}
		time.Sleep(200 * time.Millisecond) // the store may be down: try again
	}
}

// ready waits until the process answers /readyz (its store answers), or exits.
func (s *slot) ready(ctx context.Context) error {
	c := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(30 * time.Second)
	s.p.mu.Lock()
	done := s.p.done
	s.p.mu.Unlock()
	for time.Now().Before(deadline) && ctx.Err() == nil {
		resp, err := c.Get(fmt.Sprintf("http://127.0.0.1:%d/readyz", s.port))
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
		}
		select {
		case <-done:
			return fmt.Errorf("exited")
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fmt.Errorf("not ready")
}

// kill sends SIGKILL, and records when. The caller has marked the slot down.
func (s *slot) kill() {
	s.h.mu.Lock()
	s.h.kills = append(s.h.kills, chaos.Kill{Gateway: s.name, At: time.Now()})
	s.h.mu.Unlock()
	_ = s.p.signal(syscall.SIGKILL, 10*time.Second)
}

// ---- the harness ----

type config struct {
	ops, gateways, concurrency int
	storeKind                  string
	seed                       uint64
	lease                      time.Duration
	// faults are the fault classes turned on: kill, pause, store, net, upstream, client,
	// release.
	faults map[string]bool
	// pauseGap bounds the time between two pauses (default 2s to 5s).
	pauseGap [2]time.Duration
	// tenants is how many callers share the gateways, each with its own scope header value,
	// and each sending every key (default 3).
	tenants int
	// fenceMin is how many times each leg of the fence class, and the deploy class's aimed
	// leg, runs at least, however soon the operations are done.
	fenceMin int
	// fenceGap bounds the rest between two aims of a fence leg (default 1s to 3s).
	fenceGap [2]time.Duration
	// store, if set, is a store server shared with other runs (no store fault then).
	store storeServer
}

// upstreamTimeout is the gateways' --upstream-timeout: longer than a planLease upstream
// takes (the lease and a second), shorter than a planSlow one.
const upstreamTimeout = 4 * time.Second

// shutdownTimeout is the gateways' --shutdown-timeout: the drain of a rolling deploy. Some
// upstream calls take longer (slow effects, planLease, planSlow).
const shutdownTimeout = time.Second

// tenantHeader names the caller: the gateways' --scope-header, forwarded to the upstream.
const tenantHeader = "X-Chaos-Tenant"

// scopeSecret is the gateways' scope secret (IDEM_SCOPE_SECRET).
const scopeSecret = "chaos-scope-secret-0123456789"

// opID is the operation of the caller tenant under the key-and-path name base: "t1/op-0000042".
func opID(tenant, base string) string { return tenant + "/" + base }

// splitOp returns an operation's tenant and the name its key and path carry.
func splitOp(op string) (tenant, base string) {
	tenant, base, _ = strings.Cut(op, "/")
	return tenant, base
}

// scopeOf is the scope the gateways give tenant's keys.
func scopeOf(tenant string) string { return idemhttp.KeyedHashScope([]byte(scopeSecret), tenant) }

type harness struct {
	t        *testing.T
	cfg      config
	binary   string // the gateway and the operator's CLI
	run      string // prefixes every key
	dir      string
	store    storeServer
	storeURL string // what the gateways are given (the store's URL, or a wrapper's)
	up       *upstream
	slots    []*slot
	lease    time.Duration
	rng      *rand.Rand
	rngMu    sync.Mutex
	pickMu   sync.Mutex // choosing a gateway to kill or pause
	plans    []string   // by key index (operation index / tenants)
	// fenceOps are the operations the fence class made up, probed with the others.
	fenceOps []string
	fenceSeq atomic.Int64
	fences   sync.Map // op → chan string: the gateways of its executions, as they are recorded
	cuts     int      // store links held back
	deploys  []chaos.Deploy

	mu              sync.Mutex
	kills           []chaos.Kill
	pauses          []chaos.Pause
	outages         []chaos.Outage
	lost            []chaos.LostAnswer
	releases        []chaos.Release
	stalls          []chaos.Stall
	answers         []chaos.Answer
	inFlight        map[string]bool // operations being delivered
	succeededOps    []string        // finished operations that succeeded, for forced releases
	releaseOutcomes map[string]int
	releaseFailures []string // the first few outputs of failed releases
	storeCrash      int
	storeDown       time.Duration
	clientStats     struct{ attempts, retries, giveUps, conflicts, unavailable atomic.Int64 }
	clientFaults    struct{ halfRequests, hangUps atomic.Int64 }
}

func (h *harness) roll() float64 {
	h.rngMu.Lock()
	defer h.rngMu.Unlock()
	return h.rng.Float64()
}

func (h *harness) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(h.roll()*float64(hi-lo))
}

// Fault probabilities, per exchange.
var (
	frontFaults = faultproxy.Faults{DropRequest: 0.01, DropResponse: 0.02, Delay: 0.05, MaxDelay: 100 * time.Millisecond}
	backFaults  = faultproxy.Faults{DropRequest: 0.005, DropResponse: 0.01, Delay: 0.05, MaxDelay: 100 * time.Millisecond}
)

func (h *harness) onLost(l chaos.LostAnswer) {
	h.mu.Lock()
	h.lost = append(h.lost, l)
	h.mu.Unlock()
}

func (h *harness) onBackFault(ev faultproxy.Event) {
	if ev.Kind != faultproxy.KindDropResponse {
		return
	}
	m := headPath.FindSubmatch(ev.Head)
	if m == nil {
		return
	}
	var tenant string
	if t := headTenant.FindSubmatch(ev.Head); t != nil {
		tenant = string(t[1])
	}
	h.onLost(chaos.LostAnswer{Op: opID(tenant, string(m[2])), Gateway: string(m[1]), At: ev.At, Cause: "dropped by the proxy"})
}

func (h *harness) startSlots(ctx context.Context) {
	t := h.t
	for i := range h.cfg.gateways {
		s := &slot{h: h, i: i, port: freePort(t)}
		var err error
		s.back, err = faultproxy.New(faultproxy.Options{Target: h.up.addr, Seed: h.cfg.seed + uint64(100+i), OnFault: h.onBackFault})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.back.Close() })
		s.front, err = faultproxy.New(faultproxy.Options{Target: fmt.Sprintf("127.0.0.1:%d", s.port), Seed: h.cfg.seed + uint64(200+i)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.front.Close() })
		if _, file := h.store.(sqliteFile); !file {
			u, err := url.Parse(h.store.URL())
			if err != nil {
				t.Fatal(err)
			}
			if s.relay, err = newStoreRelay(u.Host); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(s.relay.Close)
		}
		if err := s.start(ctx); err != nil {
			t.Fatal(err)
		}
		h.slots = append(h.slots, s)
		// Registered after the relay's cleanup, so it runs before it: the gateway goes first.
		t.Cleanup(func() { _ = s.p.signal(syscall.SIGKILL, 10*time.Second) })
	}
}

func (h *harness) setFaults(on bool) {
	for _, s := range h.slots {
		f, b := faultproxy.Faults{}, faultproxy.Faults{}
		if on && h.cfg.faults["net"] {
			f, b = frontFaults, backFaults
		}
		_ = s.front.SetFaults(f)
		_ = s.back.SetFaults(b)
	}
}

// killer kills a random gateway now and then (never the last one up) and restarts it.
func (h *harness) killer(ctx context.Context, wg *sync.WaitGroup) {
	defer wg.Done()
	var restarts sync.WaitGroup
	defer restarts.Wait()
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(h.between(400*time.Millisecond, 1500*time.Millisecond)):
		}
		s := h.pickSlot(func(s *slot) { s.up.Store(false) })
		if s == nil {
			continue
		}
		s.kill()
		pause := h.between(50*time.Millisecond, 500*time.Millisecond)
		restarts.Go(func() {
			time.Sleep(pause)
			if err := s.start(context.WithoutCancel(ctx)); err != nil {
				h.t.Errorf("restart %s: %v", s.name, err)
			}
		})
	}
}

// storeCrasher crashes the store server now and then and starts it again.
func (h *harness) storeCrasher(ctx context.Context, wg *sync.WaitGroup) {
	defer wg.Done()
	if _, ok := h.store.(sqliteFile); ok {
		return
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(h.between(4*time.Second, 9*time.Second)):
		}
		t0 := time.Now()
		if err := h.store.Crash(); err != nil {
			h.t.Errorf("crash the store: %v", err)
		}
		time.Sleep(h.between(200*time.Millisecond, 1200*time.Millisecond))
		if err := h.store.Start(); err != nil {
			h.t.Errorf("restart the store: %v", err)
			return
		}
		h.mu.Lock()
		h.storeCrash++
		h.storeDown += time.Since(t0)
		h.outages = append(h.outages, chaos.Outage{From: t0, To: time.Now()})
		h.mu.Unlock()
	}
}

// rotating sends each attempt to a random gateway's front proxy, so retries move between
// gateways as a load balancer would.
type rotating struct {
	h    *harness
	base http.RoundTripper
	via  func(s *slot) string
	// impatient gives up on an attempt for a planLease operation after a second.
	impatient bool
}

func (r rotating) RoundTrip(req *http.Request) (*http.Response, error) {
	s := r.h.slots[int(r.h.roll()*float64(len(r.h.slots)))%len(r.h.slots)]
	out := req.Clone(req.Context())
	out.URL.Host = r.via(s)
	out.Host = ""
	if r.impatient && planOf(path.Base(req.URL.Path)) == planLease {
		return attemptTimeout(out, r.base)
	}
	return r.base.RoundTrip(out)
}

// payload is op's request body, plus extra on its amount (another payload under the same
// key). The body names the key, not the tenant: every tenant sends the same bytes under a key,
// so a store that mixes tenants up would find the same fingerprint and replay another's answer.
func (h *harness) payload(op string, extra int64) []byte {
	_, base := splitOp(op)
	return fmt.Appendf(nil, `{"op":%q,"amount":%d}`, base, int64(len(base))+extra)
}

// tenantName names tenant i; it is also its scope header's value.
func tenantName(i int) string { return fmt.Sprintf("t%d", i) }

// opName names operation i: its tenant (i modulo the tenants) and its key's name (i divided by
// them), with its plan if it has one. Consecutive operations are the same key for each tenant.
func (h *harness) opName(i int) string {
	k := i / h.cfg.tenants
	base := fmt.Sprintf("op-%07d", k)
	if p := h.plans[k]; p != planNone {
		base += "." + p
	}
	return opID(tenantName(i%h.cfg.tenants), base)
}

func (h *harness) record(a chaos.Answer) {
	h.mu.Lock()
	h.answers = append(h.answers, a)
	h.mu.Unlock()
}

// deliver sends one delivery of op through client and returns what it finally got.
func (h *harness) deliver(ctx context.Context, client *http.Client, op, key string, body []byte, mark func(*chaos.Answer)) chaos.Answer {
	tenant, base := splitOp(op)
	a := chaos.Answer{Op: op, Tenant: tenant}
	if mark != nil {
		mark(&a)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://gateway/ops/"+base, strings.NewReader(string(body)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set(tenantHeader, tenant)
	resp, err := client.Do(req)
	if err != nil {
		a.Err = err.Error()
	} else {
		b, rerr := io.ReadAll(resp.Body)
		resp.Body.Close()
		a.Status, a.Body, a.Replayed = resp.StatusCode, b, resp.Header.Get("Idempotent-Replayed") == "true"
		a.NotRetained = a.Replayed && bytes.Contains(b, []byte(idemhttp.ProblemNotRetained))
		if rerr != nil {
			a.Status, a.Err = 0, rerr.Error()
		}
	}
	return a
}

// gwLogs is what the gateways' JSON logs say: the count of each request outcome, the
// takeovers, the executions whose response was sent but could not be stored (the error the
// middleware reports with an executed outcome), of which fenced is how many lost their lease,
// and the stalls past the lease the gateways reported about themselves.
type gwLogs struct {
	outcomes  map[string]int
	takeovers int
	unstored  []chaos.Unstored
	fenced    int
	stalls    []chaos.HolderStall
}

// stallMsg is the engine's log message for a heartbeat that ran after its lease had ended.
const stallMsg = "idem: lease lapsed while this process was stalled"

// gatewayLogs reads the gateways' JSON logs.
func (h *harness) gatewayLogs() gwLogs {
	r := gwLogs{outcomes: map[string]int{}}
	files, _ := filepath.Glob(filepath.Join(h.dir, "g*.log"))
	for _, f := range files {
		gw := strings.TrimSuffix(filepath.Base(f), ".log")
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			var line struct {
				Time     time.Time       `json:"time"`
				Msg      string          `json:"msg"`
				Outcome  string          `json:"outcome"`
				Key      string          `json:"key"`
				Takeover bool            `json:"takeover"`
				Err      string          `json:"err"`
				Stalled  json.RawMessage `json:"stalled"`
				Lapsed   json.RawMessage `json:"lapsed"`
			}
			if json.Unmarshal(sc.Bytes(), &line) != nil {
				continue
			}
			switch line.Msg {
			case stallMsg:
				// The engine names the storage key: the caller's scope, "|", the client's key.
				// Every tenant's operation under that key is taken as stalled at this process.
				_, key, _ := strings.Cut(line.Key, "|")
				base := strings.TrimPrefix(key, h.run+"-")
				for i := range h.cfg.tenants {
					r.stalls = append(r.stalls, chaos.HolderStall{Op: opID(tenantName(i), base), Gateway: gw, At: line.Time,
						Stalled: logDuration(line.Stalled), Lapsed: logDuration(line.Lapsed)})
				}
			case "request":
				r.outcomes[line.Outcome]++
				if line.Takeover {
					r.takeovers++
				}
				if line.Err != "" && (line.Outcome == "executed" || line.Outcome == "oversize") {
					// The log names the client's key, not the caller: every tenant's operation
					// under that key is taken as possibly unstored at that gateway process (a
					// live answer of one then does not count as stored).
					base := strings.TrimPrefix(line.Key, h.run+"-")
					for i := range h.cfg.tenants {
						r.unstored = append(r.unstored, chaos.Unstored{Op: opID(tenantName(i), base), Gateway: gw, Err: line.Err})
					}
					if strings.Contains(line.Err, "lease lost") {
						r.fenced++
					}
				}
			}
		}
		fh.Close()
	}
	return r
}

// logDuration reads a duration a JSON log wrote as a string ("2.3s") or as nanoseconds; 0 if
// it is neither.
func logDuration(raw json.RawMessage) time.Duration {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		d, _ := time.ParseDuration(s)
		return d
	}
	var n int64
	_ = json.Unmarshal(raw, &n)
	return time.Duration(n)
}

func envInt(name string, def int) int {
	if v := os.Getenv(name); v != "" {
		if n, err := strconv.Atoi(v); err == nil && n > 0 {
			return n
		}
	}
	return def
}

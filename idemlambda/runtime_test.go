package idemlambda_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemlambda"
	"github.com/idemkit/idem/store/dynamostore"
)

// The tests in this file run idemlambda as AWS Lambda runs a Go function: the test binary
// re-executes itself as a child process that calls lambda.Start, and aws-lambda-go's runtime
// loop in it fetches invocations from a Runtime API served by the test
// (GET /2018-06-01/runtime/invocation/next, POST …/{id}/response and …/{id}/error), with the
// deadline in Lambda-Runtime-Deadline-Ms. As Lambda does, the test stops the child at the
// invocation's deadline if it has not answered, and starts a new one (a cold start). The store
// is DynamoDB Local; the handler reports each run (its effect) to the test over HTTP.

// childConfig is what a child process is told through the environment (childEnv).
type childConfig struct {
	Endpoint, Table, Effects string
	Wait                     time.Duration
	NoEngine                 bool // build no engine (the disabled mode needs none)
	KeyPath                  string
	KeyPaths                 []string
	RequireKey               bool
	LeaseMargin              time.Duration
}

const childEnv = "IDEMLAMBDA_TEST_CHILD"

// childEvent is the part of an event the child's handler reads: who it is (Label, echoed in
// the result so a merged event shows) and how long to take.
type childEvent struct {
	Label   string `json:"label"`
	SleepMS int    `json:"sleep_ms"`
}

// childMain is the child process: a Lambda function wrapped by idemlambda.Wrap.
func childMain() {
	var cfg childConfig
	if err := json.Unmarshal([]byte(os.Getenv(childEnv)), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "child config:", err)
		os.Exit(2)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	var eng *idem.Engine
	if !cfg.NoEngine {
		st, err := dynamostore.New(dynamostore.Options{Client: dynamostore.LocalClient(cfg.Endpoint, nil), Table: cfg.Table})
		if err == nil {
			eng, err = idem.New(st, idem.Options{Wait: cfg.Wait, CacheSize: 64, Logger: logger})
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "child store:", err)
			os.Exit(2)
		}
	}
	h, err := idemlambda.Wrap(idemlambda.Options{Runner: eng, KeyPath: cfg.KeyPath, KeyPaths: cfg.KeyPaths,
		RequireKey: cfg.RequireKey, LeaseMargin: cfg.LeaseMargin, Logger: logger},
		func(ctx context.Context, ev json.RawMessage) (map[string]any, error) {
			var e childEvent
			_ = json.Unmarshal(ev, &e)
			resp, err := http.Post(cfg.Effects, "text/plain", strings.NewReader(e.Label))
			if err != nil {
				return nil, err
			}
			resp.Body.Close()
			time.Sleep(time.Duration(e.SleepMS) * time.Millisecond) // deaf to ctx: only the deadline stops it
			return map[string]any{"label": e.Label, "pid": os.Getpid()}, nil
		})
	if err != nil {
		// As a function whose init fails: the runtime process exits.
		fmt.Fprintln(os.Stderr, "init:", err)
		os.Exit(3)
	}
	lambda.Start(h)
}

// effects counts the handler's runs per label.
type effects struct {
	mu sync.Mutex
	n  map[string]int
}

func (e *effects) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	e.mu.Lock()
	e.n[string(b)]++
	e.mu.Unlock()
}

func (e *effects) count(label string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.n[label]
}

// lockedBuffer is a child's stderr.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// invocation is one event handed to a runtime loop.
type invocation struct {
	id       string
	payload  []byte
	deadline time.Time
	done     chan outcome
}

// outcome is how an invocation ended, as Lambda would report it.
type outcome struct {
	body     []byte // the response, or the error document
	failed   bool   // posted to …/error
	timedOut bool   // stopped at its deadline
	exited   bool   // the runtime process exited (an init failure)
}

// environment is one Lambda execution environment: a Runtime API and the runtime process
// polling it, replaced after a timeout.
type environment struct {
	t      *testing.T
	srv    *httptest.Server
	env    []string
	next   chan *invocation
	mu     sync.Mutex
	open   map[string]*invocation
	cmd    *exec.Cmd
	exited chan struct{}
	stderr *lockedBuffer
	starts int
}

func newEnvironment(t *testing.T, cfg childConfig, extraEnv ...string) *environment {
	t.Helper()
	raw, _ := json.Marshal(cfg)
	e := &environment{t: t, next: make(chan *invocation), open: map[string]*invocation{}, stderr: new(lockedBuffer)}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /2018-06-01/runtime/invocation/next", func(w http.ResponseWriter, r *http.Request) {
		select {
		case inv := <-e.next:
			e.mu.Lock()
			e.open[inv.id] = inv
			e.mu.Unlock()
			w.Header().Set("Lambda-Runtime-Aws-Request-Id", inv.id)
			w.Header().Set("Lambda-Runtime-Deadline-Ms", strconv.FormatInt(inv.deadline.UnixMilli(), 10))
			w.Header().Set("Lambda-Runtime-Invoked-Function-Arn", "arn:aws:lambda:eu-west-1:000000000000:function:orders")
			w.Header().Set("Lambda-Runtime-Trace-Id", "Root=1-00000000-000000000000000000000000")
			_, _ = w.Write(inv.payload)
		case <-r.Context().Done():
		}
	})
	answer := func(failed bool) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			e.mu.Lock()
			inv := e.open[r.PathValue("id")]
			delete(e.open, r.PathValue("id"))
			e.mu.Unlock()
			if inv != nil {
				inv.done <- outcome{body: b, failed: failed}
			}
			w.WriteHeader(http.StatusAccepted)
		}
	}
	mux.HandleFunc("POST /2018-06-01/runtime/invocation/{id}/response", answer(false))
	mux.HandleFunc("POST /2018-06-01/runtime/invocation/{id}/error", answer(true))
	e.srv = httptest.NewServer(mux)
	e.env = append(os.Environ(), childEnv+"="+string(raw),
		"AWS_LAMBDA_RUNTIME_API="+strings.TrimPrefix(e.srv.URL, "http://"),
		"AWS_LAMBDA_FUNCTION_NAME=orders", "AWS_LAMBDA_FUNCTION_MEMORY_SIZE=128", "AWS_REGION=eu-west-1")
	e.env = append(e.env, extraEnv...)
	e.start()
	t.Cleanup(func() {
		e.stop()
		e.srv.Close()
		if t.Failed() {
			t.Logf("runtime process stderr:\n%s", e.stderr.String())
		}
	})
	return e
}

// start starts a runtime process (a cold start).
func (e *environment) start() {
	e.cmd = exec.Command(os.Args[0], "-test.run=^$")
	e.cmd.Env = e.env
	e.cmd.Stdout, e.cmd.Stderr = e.stderr, e.stderr
	if err := e.cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	e.starts++
	exited := make(chan struct{})
	cmd := e.cmd
	go func() { _ = cmd.Wait(); close(exited) }()
	e.exited = exited
}

// stop kills the runtime process, as Lambda does at a timeout.
func (e *environment) stop() {
	_ = e.cmd.Process.Kill()
	<-e.exited
}

// invoke sends payload with timeout as the function's timeout and returns how it ended. An
// invocation not answered by its deadline is stopped there, and the environment restarted.
// Invocations of one environment must not overlap, as in Lambda.
func (e *environment) invoke(payload string, timeout time.Duration) outcome {
	inv := &invocation{id: fmt.Sprintf("req-%016x", rand.Uint64()), payload: []byte(payload),
		deadline: time.Now().Add(timeout), done: make(chan outcome, 1)}
	stop := time.NewTimer(timeout)
	defer stop.Stop()
	select {
	case e.next <- inv:
	case <-e.exited:
		return outcome{exited: true}
	case <-stop.C:
		e.t.Fatalf("the runtime did not ask for the next invocation within %s", timeout)
	}
	select {
	case o := <-inv.done:
		return o
	case <-e.exited:
		return outcome{exited: true}
	case <-stop.C:
		e.stop()
		e.mu.Lock()
		delete(e.open, inv.id)
		e.mu.Unlock()
		e.start()
		return outcome{timedOut: true}
	}
}

// label is the label of an invocation's result ("" if it failed).
func (o outcome) label() string {
	var r struct{ Label string }
	if o.failed || o.timedOut || o.exited || json.Unmarshal(o.body, &r) != nil {
		return ""
	}
	return r.Label
}

// runtimeSetup makes a DynamoDB Local table, an effects counter and the child's configuration.
func runtimeSetup(t *testing.T) (*effects, childConfig) {
	t.Helper()
	_, ep, table := dynamoTable(t)
	fx := &effects{n: map[string]int{}}
	srv := httptest.NewServer(fx)
	t.Cleanup(srv.Close)
	return fx, childConfig{Endpoint: ep, Table: table, Effects: srv.URL}
}

// ev is an event with label and a key field (or none when value is "").
func ev(label, field, value string) string {
	if value == "" {
		return `{"label":"` + label + `"}`
	}
	return `{"label":"` + label + `","` + field + `":` + value + `}`
}

// Key cases through a real runtime loop on DynamoDB Local: values that carry nothing are no
// key (each event runs, none gets another's answer; with RequireKey each fails), distinct JSON
// values are distinct keys, the same value is one key, and several fields make one key.
func TestRuntimeKeys(t *testing.T) {
	fx, cfg := runtimeSetup(t)
	cfg.KeyPath = "order_id"
	fn := newEnvironment(t, cfg)
	const timeout = 10 * time.Second

	// Values that carry nothing: both events run, each answers for itself.
	for i, v := range []string{`{}`, `[]`, `[null,null]`, `""`, `null`, ``} {
		for _, who := range []string{"a", "b"} {
			label := fmt.Sprintf("empty-%d-%s", i, who)
			if o := fn.invoke(ev(label, "order_id", v), timeout); o.label() != label {
				t.Errorf("order_id %s, event %s: answered %s (failed=%v)", v, label, o.body, o.failed)
			}
			if fx.count(label) != 1 {
				t.Errorf("order_id %s, event %s: ran %d times, want 1", v, label, fx.count(label))
			}
		}
	}
	// Distinct values are distinct keys.
	objKey := `"#json:{\"a\":1}"`
	for i, pair := range [][2]string{{`5`, `"5"`}, {`true`, `"true"`}, {`{"a":1}`, objKey},
		{`{"b":2}`, `"sha256:0ab1a6d394cd30195f0642b67ae1180c375ffadf5dd7f39c390668b5fdb6da93"`}} { // the hash an object key once was
		for j, v := range pair {
			label := fmt.Sprintf("apart-%d-%d", i, j)
			if o := fn.invoke(ev(label, "order_id", v), timeout); o.label() != label {
				t.Errorf("order_id %s after %s: answered %s, want its own answer", v, pair[0], o.body)
			}
		}
	}
	// The same value, written two ways, is one key: the second event gets the first's answer.
	if o := fn.invoke(ev("same-1", "order_id", `12.50`), timeout); o.label() != "same-1" {
		t.Fatalf("first: %s", o.body)
	}
	if o := fn.invoke(ev("same-2", "order_id", `1.25e1`), timeout); o.label() != "same-1" || fx.count("same-2") != 0 {
		t.Errorf("duplicate: answered %s, ran %d times", o.body, fx.count("same-2"))
	}

	// RequireKey: each value that carries nothing fails with ErrMissingKey, the handler not run.
	cfg.RequireKey = true
	strict := newEnvironment(t, cfg)
	for i, v := range []string{`{}`, `[]`, `[null,null]`, `""`, `null`, ``} {
		label := fmt.Sprintf("strict-%d", i)
		o := strict.invoke(ev(label, "order_id", v), timeout)
		if !o.failed || !strings.Contains(string(o.body), "no idempotency key") || fx.count(label) != 0 {
			t.Errorf("RequireKey, order_id %s: %s failed=%v, ran %d times", v, o.body, o.failed, fx.count(label))
		}
	}

	// Several fields: two users' orders with one id are two keys.
	cfg.RequireKey, cfg.KeyPath, cfg.KeyPaths = false, "", []string{"user", "order_id"}
	multi := newEnvironment(t, cfg)
	for _, c := range []struct{ label, user, want string }{{"u1-7", "u1", "u1-7"}, {"u2-7", "u2", "u2-7"}, {"u1-7-again", "u1", "u1-7"}} {
		o := multi.invoke(`{"label":"`+c.label+`","user":"`+c.user+`","order_id":7}`, timeout)
		if o.label() != c.want {
			t.Errorf("user %s order 7 (%s): answered %s, want %s's answer", c.user, c.label, o.body, c.want)
		}
	}
	if fx.count("u1-7") != 1 || fx.count("u2-7") != 1 || fx.count("u1-7-again") != 0 {
		t.Errorf("runs: u1-7 %d, u2-7 %d, u1-7-again %d; want 1, 1, 0", fx.count("u1-7"), fx.count("u2-7"), fx.count("u1-7-again"))
	}
}

// An invocation that times out mid-handler is stopped at its deadline; a retry sent right
// after it is served within the margin (the engine's Wait covers it), not refused as in flight
// for seconds.
func TestRuntimeRetryAfterTimeout(t *testing.T) {
	fx, cfg := runtimeSetup(t)
	cfg.KeyPath, cfg.Wait = "order_id", 1500*time.Millisecond
	first, second := newEnvironment(t, cfg), newEnvironment(t, cfg)
	// Both runtimes up and polling before the clock starts.
	for i, fn := range []*environment{first, second} {
		label := fmt.Sprintf("warm-%d", i)
		if o := fn.invoke(ev(label, "order_id", `"`+label+`"`), 10*time.Second); o.label() != label {
			t.Fatalf("warm-up: %s", o.body)
		}
	}
	const timeout = 1500 * time.Millisecond // the function's timeout
	start := time.Now()
	o := first.invoke(`{"label":"slow","sleep_ms":5000,"order_id":"o-timeout"}`, timeout)
	if !o.timedOut {
		t.Fatalf("the slow invocation did not time out: %s", o.body)
	}
	deadline := start.Add(timeout)
	if fx.count("slow") != 1 {
		t.Fatalf("the slow handler ran %d times before its timeout", fx.count("slow"))
	}
	retry := second.invoke(ev("retry", "order_id", `"o-timeout"`), 10*time.Second)
	served := time.Since(deadline)
	if retry.label() != "retry" {
		t.Fatalf("retry right after the timeout: %s (failed=%v), %s after the deadline", retry.body, retry.failed, served)
	}
	t.Logf("retry served %s after the timed-out invocation's deadline (margin %s)", served.Round(time.Millisecond), idemlambda.DefaultLeaseMargin)
	if served > idemlambda.DefaultLeaseMargin+time.Second {
		t.Errorf("retry served %s after the deadline, want within the margin", served)
	}
	if first.starts != 2 {
		t.Errorf("the timed-out environment started %d times, want 2 (stopped, then a cold start)", first.starts)
	}
	// The stopped function never completed: its key was run again once, and now it replays.
	if o := first.invoke(ev("third", "order_id", `"o-timeout"`), 10*time.Second); o.label() != "retry" || fx.count("third") != 0 {
		t.Errorf("after the retry: %s, third ran %d times", o.body, fx.count("third"))
	}
}

// Several runtime processes (concurrent execution environments) get the same events at once:
// each key runs once and every invocation gets its answer.
func TestRuntimeConcurrentInvocations(t *testing.T) {
	fx, cfg := runtimeSetup(t)
	cfg.KeyPath, cfg.Wait = "order_id", 8*time.Second
	const envs, keys = 4, 5
	fns := make([]*environment, envs)
	for i := range fns {
		fns[i] = newEnvironment(t, cfg)
	}
	for k := range keys {
		answers := make([]string, envs)
		var wg sync.WaitGroup
		for i, fn := range fns {
			wg.Go(func() {
				o := fn.invoke(`{"label":"k`+strconv.Itoa(k)+`-e`+strconv.Itoa(i)+`","sleep_ms":300,"order_id":"o-`+strconv.Itoa(k)+`"}`, 15*time.Second)
				answers[i] = o.label()
			})
		}
		wg.Wait()
		ran := 0
		for i := range envs {
			ran += fx.count("k" + strconv.Itoa(k) + "-e" + strconv.Itoa(i))
		}
		if ran != 1 {
			t.Errorf("key o-%d ran %d times over %d concurrent invocations, want 1", k, ran, envs)
		}
		for i, a := range answers {
			if a == "" || a != answers[0] {
				t.Errorf("key o-%d, environment %d: answer %q, first %q", k, i, a, answers[0])
			}
		}
	}
}

// IDEMLAMBDA_DISABLED runs without a store, with a warning at each cold start, and is refused
// in a deployed function (AWS_LAMBDA_FUNCTION_NAME set, not under SAM local).
func TestRuntimeDisabled(t *testing.T) {
	fx, cfg := runtimeSetup(t)
	cfg.KeyPath, cfg.NoEngine = "order_id", true
	deployed := newEnvironment(t, cfg, idemlambda.DisabledEnv+"=1")
	if o := deployed.invoke(ev("d", "order_id", `"o-1"`), 10*time.Second); !o.exited || fx.count("d") != 0 {
		t.Fatalf("disabled in a deployed function: %+v, ran %d times", o, fx.count("d"))
	}
	if !strings.Contains(deployed.stderr.String(), idemlambda.DisabledEnv+" is set in a deployed Lambda function") {
		t.Fatalf("no reason given: %s", deployed.stderr.String())
	}
	local := newEnvironment(t, cfg, idemlambda.DisabledEnv+"=1", "AWS_SAM_LOCAL=true")
	for _, label := range []string{"l1", "l2"} {
		if o := local.invoke(ev(label, "order_id", `"o-1"`), 10*time.Second); o.label() != label {
			t.Fatalf("disabled under SAM local: %s", o.body)
		}
	}
	if fx.count("l1") != 1 || fx.count("l2") != 1 {
		t.Fatalf("disabled: runs %d and %d, want each event run", fx.count("l1"), fx.count("l2"))
	}
	if !strings.Contains(local.stderr.String(), "idempotency is OFF") {
		t.Fatalf("no warning at the cold start: %s", local.stderr.String())
	}
}

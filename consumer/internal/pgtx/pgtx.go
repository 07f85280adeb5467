// Package pgtx runs consumers in transaction mode against a real PostgreSQL for the consumer
// package's and the broker adapters' tests: a pgstore.TxRunner, an effects table that the
// handlers write through the runner's transaction, and a way to make commits fail.
package pgtx

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/idemkit/idem"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/consumer/consumertest"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/store/pgstore"
)

// Env is one test's share of the database: an idem store on its own table, a TxRunner over
// it, and an effects table. Each effect row may name a gate; the foreign key to the gates
// table is checked at COMMIT, so an effect whose gate is missing makes its transaction's
// commit fail after the handler, the claim and the completion all succeeded.
type Env struct {
	Pool   *pgxpool.Pool
	Store  *pgstore.Store
	Runner *pgstore.TxRunner
	// Table is the idem store's table; Effects and Gates the effects and gates tables.
	Table, Effects, Gates string

	mu     sync.Mutex
	doomed map[string]bool
}

// New returns a fresh Env, or nil after skipping t when PostgreSQL is not reachable (failing
// it when services are required). Everything it creates is dropped at t's cleanup.
func New(t testing.TB) *Env {
	t.Helper()
	url := testenv.PostgresURL(t)
	if url == "" {
		return nil
	}
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	// Every delivery in flight holds a connection for its transaction (duplicates waiting on
	// the first one's claim too); more deliveries than this wait for one. Few, as the
	// database is shared by many tests at once.
	cfg.MaxConns = 10
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	id := randHex(5)
	e := &Env{Pool: pool, Table: "txc_idem_" + id, Effects: "txc_effects_" + id, Gates: "txc_gates_" + id, doomed: map[string]bool{}}
	if _, err := pool.Exec(ctx, fmt.Sprintf(`CREATE TABLE %s (id text PRIMARY KEY);
CREATE TABLE %s (id text NOT NULL, gate text REFERENCES %s (id) DEFERRABLE INITIALLY DEFERRED)`, e.Gates, e.Effects, e.Gates)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = pool.Exec(context.Background(), "DROP TABLE IF EXISTS "+e.Effects+", "+e.Gates+", "+e.Table)
	})
	if e.Store, err = pgstore.New(pool, pgstore.Options{Table: e.Table}); err != nil {
		t.Fatal(err)
	}
	if err := e.Store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	e.Runner = pgstore.NewTxRunner(e.Store, pgstore.TxOptions{})
	return e
}

// Add inserts the effect row of event id through the transaction in ctx, and fails when ctx
// carries none: an effect written outside the claim's transaction would not roll back with
// it. The row of a doomed event names a missing gate, so its transaction's commit fails.
func (e *Env) Add(ctx context.Context, id string) error {
	tx := pgstore.TxFromContext(ctx)
	if tx == nil {
		return errors.New("pgtx: the handler's context carries no transaction")
	}
	var gate any
	e.mu.Lock()
	if e.doomed[id] {
		gate = id
	}
	e.mu.Unlock()
	_, err := tx.Exec(ctx, "INSERT INTO "+e.Effects+" (id, gate) VALUES ($1, $2)", id, gate)
	return err
}

// Doom makes the commit of every transaction that writes the effect of one of ids fail, until
// Open.
func (e *Env) Doom(ids ...string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, id := range ids {
		e.doomed[id] = true
	}
}

// Open creates the gates of ids: the transactions that write their effects commit again.
func (e *Env) Open(ctx context.Context, ids ...string) error {
	for _, id := range ids {
		if _, err := e.Pool.Exec(ctx, "INSERT INTO "+e.Gates+" (id) VALUES ($1) ON CONFLICT DO NOTHING", id); err != nil {
			return err
		}
	}
	return nil
}

// Counts implements consumertest.Effects: the committed effect rows per event id.
func (e *Env) Counts(ctx context.Context) (map[string]int, error) {
	rows, err := e.Pool.Query(ctx, "SELECT id, count(*) FROM "+e.Effects+" GROUP BY id")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	m := map[string]int{}
	for rows.Next() {
		var id string
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			return nil, err
		}
		m[id] = n
	}
	return m, rows.Err()
}

// Records returns how many idem records the store holds, and how many of them are completed.
func (e *Env) Records(ctx context.Context) (all, completed int, err error) {
	err = e.Pool.QueryRow(ctx, "SELECT count(*), count(*) FILTER (WHERE state = 2) FROM "+e.Table).Scan(&all, &completed)
	return all, completed, err
}

// Run runs consumertest's suite against broker with its consumers in transaction mode (a
// TxRunner, effects written in its transaction), then the CommitFails test.
func Run(t *testing.T, broker consumertest.Broker, opt consumertest.Options) {
	if testenv.PostgresURL(t) == "" {
		return
	}
	opt.Runner = func(t *testing.T) consumer.Runner {
		return envOf(t).Runner
	}
	opt.Effects = func(t *testing.T) consumertest.Effects { return envOf(t) }
	t.Run("Suite", func(t *testing.T) { consumertest.Run(t, broker, opt) })
	t.Run("CommitFails", func(t *testing.T) { CommitFails(t, broker) })
}

var envs sync.Map // *testing.T → *Env, for the suite's Runner and Effects of one subtest

func envOf(t *testing.T) *Env {
	if e, ok := envs.Load(t); ok {
		return e.(*Env)
	}
	e := New(t)
	envs.Store(t, e)
	t.Cleanup(func() { envs.Delete(t) })
	return e
}

// CommitFails publishes events once each and makes the commit of a fifth of them fail: their
// handler, claim and completion succeed, then COMMIT fails. Such a delivery must not be acked:
// it comes back, fails again while the cause lasts, leaves neither an effect row nor an idem
// record, and once the cause is gone it is processed, once. A consumer or adapter that acks a
// delivery whose transaction did not commit loses it: its event never gets its row.
func CommitFails(t *testing.T, broker consumertest.Broker) {
	t.Parallel()
	env := New(t)
	if env == nil {
		return
	}
	q := broker.NewQueue(t)
	ctx := context.Background()
	const n = 20
	prefix := randHex(4)
	var ids, doomed []string
	for i := range n {
		id := fmt.Sprintf("%s-%d", prefix, i)
		ids = append(ids, id)
		// A few: a broker that requeues a failed message at the head of the queue (RabbitMQ)
		// hands the doomed ones out again at once, and more of them than a worker's
		// concurrency would starve the others.
		if i%5 == 0 {
			doomed = append(doomed, id)
		}
	}
	env.Doom(doomed...)

	var mu sync.Mutex
	failed := map[string]int{}
	var processed atomic.Int64
	type event struct {
		ID string `json:"id"`
	}
	c, err := consumer.New(consumer.Options{
		Runner: env.Runner,
		Scope:  "committest", RetryDelay: 50 * time.Millisecond, InFlightDelay: 200 * time.Millisecond, Logger: quiet(),
		Key: func(m *consumer.Message) (string, error) {
			var e event
			if err := json.Unmarshal(m.Body, &e); err != nil || e.ID == "" {
				return "", fmt.Errorf("no event id in %q", m.Body)
			}
			return "event/" + e.ID, nil
		},
		OnEvent: func(ev consumer.Event) {
			r := ev.Result
			switch r.Outcome {
			case consumer.OutcomeFailed:
				mu.Lock()
				failed[r.Key]++
				mu.Unlock()
			case consumer.OutcomeExecuted:
				processed.Add(1)
			}
		},
	}, func(ctx context.Context, m *consumer.Message) ([]byte, error) {
		var e event
		if err := json.Unmarshal(m.Body, &e); err != nil {
			return nil, consumer.Reject(err)
		}
		return nil, env.Add(ctx, e.ID)
	})
	if err != nil {
		t.Fatal(err)
	}
	var workers []consumertest.Worker
	for range 2 {
		w, err := q.Start(ctx, c, nil)
		if err != nil {
			t.Fatal(err)
		}
		workers = append(workers, w)
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			for _, w := range workers {
				w.Stop()
			}
		}
	}
	defer stop()
	for _, id := range ids {
		body, _ := json.Marshal(event{ID: id})
		if err := q.Publish(ctx, body); err != nil {
			t.Fatal(err)
		}
	}

	waitFor(t, "every doomed event to fail twice and every other to commit", func() (bool, string) {
		counts, err := env.Counts(ctx)
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		twice := 0
		for _, id := range doomed {
			if failed[idem.ScopedKey("committest", "event/"+id)] >= 2 {
				twice++
			}
		}
		return twice == len(doomed) && len(counts) == n-len(doomed),
			fmt.Sprintf("%d/%d doomed events failed twice, %d/%d others committed", twice, len(doomed), len(counts), n-len(doomed))
	})
	counts, err := env.Counts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range doomed {
		if counts[id] != 0 {
			t.Errorf("event %s: %d effect rows although its commit failed", id, counts[id])
		}
	}
	all, completed, err := env.Records(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if all != n-len(doomed) || completed != all {
		t.Errorf("%d idem records (%d completed) while %d events committed: a failed commit left a record", all, completed, n-len(doomed))
	}

	if err := env.Open(ctx, doomed...); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "every event's effect", func() (bool, string) {
		counts, err := env.Counts(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return len(counts) == n, fmt.Sprintf("%d/%d events have their row", len(counts), n)
	})
	stop() // finishes and acks the deliveries under way
	if pending, err := q.Pending(ctx); err != nil || pending != 0 {
		t.Errorf("%d messages left in the queue (%v)", pending, err)
	}
	if counts, err = env.Counts(ctx); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if counts[id] != 1 {
			t.Errorf("event %s: %d effect rows, want 1", id, counts[id])
		}
	}
	if all, completed, err = env.Records(ctx); err != nil {
		t.Fatal(err)
	}
	if all != n || completed != n {
		t.Errorf("%d idem records, %d completed; want %d completed", all, completed, n)
	}
	if p := processed.Load(); p != n {
		t.Errorf("%d OutcomeExecuted outcomes, want %d", p, n)
	}
	mu.Lock()
	t.Logf("%d events, %d with failing commits; failed deliveries per doomed key: %v", n, len(doomed), failed)
	mu.Unlock()
}

func waitFor(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s: %s", what, state)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/outbox"
	"github.com/idemkit/idem/outbox/pgoutbox"
	"github.com/idemkit/idem/store/pgstore"
)

// childEnv names the environment variable that makes a test binary a relay process: it holds
// the child's Config as JSON.
const childEnv = "IDEM_OUTBOX_KILLED_RELAY"

// ChildLease is the killed relays' lease: the time their claims outlive them.
const ChildLease = time.Second

// Config is what a relay process is told.
type Config struct {
	// PG is the database; Table the outbox table.
	PG, Table string
	// Broker is what the publisher package's child needs to reach its broker (a URL).
	Broker string
	// Pass is how many events the relay publishes and marks sent before it stops dead after
	// the first of the two steps (publish, mark sent) of the next one.
	Pass int
}

// ChildConfig returns the Config of this process when it is a relay child (and true), or
// false in the test itself.
func ChildConfig() (Config, bool) {
	raw := os.Getenv(childEnv)
	if raw == "" {
		return Config{}, false
	}
	var c Config
	if err := json.Unmarshal([]byte(raw), &c); err != nil {
		fmt.Fprintln(os.Stderr, "relay child:", err)
		os.Exit(2)
	}
	return c, true
}

// stepLine is what a relay child prints when it has done the first of an event's two steps;
// the test kills it on reading it.
const stepLine = "FIRST-STEP-DONE"

// Child runs the relay of a child process with pub: it publishes Pass events (each published
// then marked sent), then completes the first step of the next event (whichever of publish
// and mark-sent the relay does first), prints stepLine with the event's key and waits to be
// killed with SIGKILL. It never returns.
func Child(cfg Config, pub outbox.Publisher) {
	ctx := context.Background()
	db, err := pgxpool.New(ctx, cfg.PG)
	if err != nil {
		fmt.Fprintln(os.Stderr, "relay child:", err)
		os.Exit(2)
	}
	st, err := pgoutbox.New(db, pgoutbox.Options{Table: cfg.Table})
	if err != nil {
		fmt.Fprintln(os.Stderr, "relay child:", err)
		os.Exit(2)
	}
	var mu sync.Mutex
	done := map[int64]bool{} // events fully published and marked
	first := func(m outbox.Message) {
		// Called once an event's first step succeeded: Pass events go on, the next one stops
		// the process dead between its two steps.
		mu.Lock()
		defer mu.Unlock()
		if len(done) < cfg.Pass {
			return
		}
		fmt.Printf("%s %s\n", stepLine, m.Key)
		time.Sleep(time.Hour) // SIGKILL arrives
	}
	var started sync.Map
	wrapped := outbox.PublisherFunc(func(ctx context.Context, m outbox.Message) error {
		if err := pub.Publish(ctx, m); err != nil {
			return err
		}
		if _, second := started.LoadOrStore(m.ID, true); !second {
			first(m)
		} else {
			mu.Lock()
			done[m.ID] = true
			mu.Unlock()
		}
		return nil
	})
	relay, err := outbox.NewRelay(stepStore{st, &started, first, func(id int64) { mu.Lock(); done[id] = true; mu.Unlock() }}, wrapped, outbox.RelayOptions{
		Lease: ChildLease, PublishTimeout: ChildLease / 2, Interval: 20 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, nil)),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "relay child:", err)
		os.Exit(2)
	}
	_ = relay.Run(ctx)
	os.Exit(2)
}

// stepStore notes an event's mark-sent as one of its two steps.
type stepStore struct {
	*pgoutbox.Store
	started *sync.Map
	first   func(outbox.Message)
	done    func(int64)
}

func (s stepStore) Sent(ctx context.Context, m outbox.Message) error {
	if err := s.Store.Sent(ctx, m); err != nil {
		return err
	}
	if _, second := s.started.LoadOrStore(m.ID, true); !second {
		s.first(m)
	} else {
		s.done(m.ID)
	}
	return nil
}

// Killed is the killed-relay proof for one broker.
type Killed struct {
	// Pub publishes to the broker, for the relay of the test itself (the one that finishes).
	Pub outbox.Publisher
	// Broker is passed to the child relays in Config.Broker.
	Broker string
	// Topic is where the events go.
	Topic string
	// Consume reads the broker into c until ctx ends.
	Consume func(ctx context.Context, c *consumer.Consumer) error
	// Test is the name of the test function that runs this (the child runs it again).
	Test string
}

// killedPayments is how many payments RunKilled writes; killedRelays how many relay
// processes it kills, each between the two steps of a different event.
const killedPayments, killedRelays = 6, 3

// RunKilled writes payments with their events, then runs relay processes (the test binary
// again) that each publish an event to the real broker and are killed with SIGKILL before
// they mark it sent; after each one's lease the next relay publishes that event again, and
// a last relay publishes the rest. An idem consumer on PostgreSQL, keyed by the event's
// Idempotency-Key header, writes each payment's effect in a table in the transaction of its
// idempotency record. It fails unless every payment's effect row is there exactly once and
// each killed relay's event reached the consumer at least twice.
func RunKilled(t *testing.T, k Killed) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	pgURL := testenv.PostgresURL(t)
	db, err := pgxpool.New(ctx, pgURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	suffix := rand.Int64()
	opt := pgoutbox.Options{Table: fmt.Sprintf("outbox_kill_%d", suffix)}
	payments := fmt.Sprintf("payments_kill_%d", suffix)
	effects := fmt.Sprintf("effects_kill_%d", suffix)
	idemTable := fmt.Sprintf("idem_kill_%d", suffix)
	if err := pgoutbox.Migrate(ctx, db, opt); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, "CREATE TABLE "+payments+" (id int PRIMARY KEY, amount int NOT NULL); CREATE TABLE "+effects+" (id bigserial PRIMARY KEY, key text NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_, _ = db.Exec(context.Background(), "DROP TABLE IF EXISTS "+opt.Table+", "+payments+", "+effects+", "+idemTable)
	}()
	keys := make([]string, killedPayments)
	for i := range killedPayments {
		keys[i] = fmt.Sprintf("payment-%d/captured", i)
		tx, err := db.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, "INSERT INTO "+payments+" VALUES ($1, $2)", i, 100+i); err != nil {
			t.Fatal(err)
		}
		if err := pgoutbox.Add(ctx, tx, opt, outbox.Message{Key: keys[i], Topic: k.Topic, Body: fmt.Appendf(nil, "%d", i)}); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}

	// The consumer: the effect row commits with the idempotency record (pgstore's
	// transaction mode), so a row per execution is a count of executions.
	st, err := pgstore.New(db, pgstore.Options{Table: idemTable})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	deliveries := map[string]int{}
	c, err := consumer.New(consumer.Options{
		Runner: pgstore.NewTxRunner(st, pgstore.TxOptions{}),
		Scope:  "payments-kill",
		Key: func(m *consumer.Message) (string, error) {
			key, err := outbox.KeyOf(m.Header)
			mu.Lock()
			deliveries[key]++
			mu.Unlock()
			return key, err
		},
	}, func(ctx context.Context, m *consumer.Message) ([]byte, error) {
		key, _ := outbox.KeyOf(m.Header)
		_, err := pgstore.TxFromContext(ctx).Exec(ctx, "INSERT INTO "+effects+" (key) VALUES ($1)", key)
		return nil, err
	})
	if err != nil {
		t.Fatal(err)
	}
	cctx, stopConsumer := context.WithCancel(ctx)
	consumed := make(chan error, 1)
	go func() { consumed <- k.Consume(cctx, c) }()
	defer func() { stopConsumer(); <-consumed }()

	// The relays that die between an event's two steps.
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var killed []string
	for pass := range killedRelays {
		raw, _ := json.Marshal(Config{PG: pgURL, Table: opt.Table, Broker: k.Broker, Pass: pass})
		cmd := exec.Command(exe, "-test.run=^"+k.Test+"$", "-test.count=1")
		cmd.Env = append(os.Environ(), childEnv+"="+string(raw))
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		key := make(chan string, 1)
		go func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				if f := strings.Fields(sc.Text()); len(f) == 2 && f[0] == stepLine {
					key <- f[1]
				}
			}
			close(key)
		}()
		select {
		case kk, ok := <-key:
			if !ok {
				_ = cmd.Wait()
				t.Fatalf("relay %d ended before its first step: %s", pass, stderr.String())
			}
			_ = cmd.Process.Kill() // SIGKILL: no deferred function, no mark-sent
			killed = append(killed, kk)
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			t.Fatalf("relay %d never published: %s", pass, stderr.String())
		}
		_ = cmd.Wait()
		t.Logf("relay process %d killed between the two steps of %s", pass, killed[pass])
	}

	// The last relay, after the lease of the last killed one.
	relay, err := outbox.NewRelay(st2(db, opt, t), k.Pub, outbox.RelayOptions{
		Interval: 20 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	rctx, stopRelay := context.WithCancel(ctx)
	relayed := make(chan error, 1)
	go func() { relayed <- relay.Run(rctx) }()
	defer func() { stopRelay(); <-relayed }()

	count := func() map[string]int {
		rows, err := db.Query(ctx, "SELECT key, count(*) FROM "+effects+" GROUP BY key")
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		got := map[string]int{}
		for rows.Next() {
			var key string
			var n int
			if err := rows.Scan(&key, &n); err != nil {
				t.Fatal(err)
			}
			got[key] = n
		}
		return got
	}
	// Wait until the outbox is drained and every event was delivered (each killed relay's
	// twice), or, if some never is, until nothing has moved for three seconds.
	var got map[string]int
	quietSince := time.Now()
	last := ""
	for {
		got = count()
		lag, err := relay.Lag(ctx)
		mu.Lock()
		all := len(deliveries) == killedPayments
		for _, kk := range killed {
			all = all && deliveries[kk] >= 2
		}
		state := fmt.Sprint(got, deliveries, lag)
		mu.Unlock()
		if state != last {
			last, quietSince = state, time.Now()
		}
		if err == nil && lag == 0 && (all && len(got) == killedPayments || time.Since(quietSince) > 3*time.Second) {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("not drained in 90s: effects %v, deliveries %v, lag %v (%v)", got, deliveries, lag, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, key := range keys {
		switch n := got[key]; {
		case n == 0:
			t.Errorf("%s: its effect never ran: the event was lost", key)
		case n > 1:
			t.Errorf("%s: its effect ran %d times, want once", key, n)
		}
	}
	for _, kk := range killed {
		if deliveries[kk] < 2 {
			t.Errorf("%s: delivered %d times, want at least 2 (its relay was killed after publishing it, before marking it sent)", kk, deliveries[kk])
		}
	}
	t.Logf("%d payments, %d relays killed between publish and mark-sent, deliveries %v, effects %v", killedPayments, len(killed), deliveries, got)
}

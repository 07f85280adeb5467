// Package e2e runs the outbox end to end for the publisher packages' tests: payments and
// their events written in one PostgreSQL transaction each, a relay publishing them to a real
// broker (every event's first publish reported failed after the broker took it, so each is
// delivered at least twice), and an idem consumer whose effect must run exactly once per
// payment.
package e2e

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/outbox"
	"github.com/idemkit/idem/outbox/pgoutbox"
	"github.com/idemkit/idem/store/pgstore"
)

// Payments is how many payments Run writes.
const Payments = 60

// Run writes Payments payments with their events, relays them with pub to topic, and runs
// consume (which reads the broker into c until ctx ends). It fails unless every payment's
// effect ran exactly once although every event was delivered at least twice.
func Run(t *testing.T, pub outbox.Publisher, topic string, consume func(ctx context.Context, c *consumer.Consumer) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	db, err := pgxpool.New(ctx, testenv.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	suffix := rand.Int64()
	opt := pgoutbox.Options{Table: fmt.Sprintf("outbox_e2e_%d", suffix)}
	payments := fmt.Sprintf("payments_e2e_%d", suffix)
	if err := pgoutbox.Migrate(ctx, db, opt); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, "CREATE TABLE "+payments+" (id int PRIMARY KEY, amount int NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = db.Exec(context.Background(), "DROP TABLE "+opt.Table+", "+payments) }()

	// The producer: each payment and its event in one transaction.
	for i := range Payments {
		tx, err := db.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, "INSERT INTO "+payments+" VALUES ($1, $2)", i, 100+i); err != nil {
			t.Fatal(err)
		}
		ev := outbox.Message{Key: fmt.Sprintf("payment-%d/captured", i), Topic: topic, Body: fmt.Appendf(nil, "%d", i)}
		if err := pgoutbox.Add(ctx, tx, opt, ev); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}

	// The consumer: idem on PostgreSQL, the key from the event's header.
	st, err := pgstore.New(db, pgstore.Options{Table: fmt.Sprintf("idem_e2e_%d", suffix)})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = db.Exec(context.Background(), fmt.Sprintf("DROP TABLE idem_e2e_%d", suffix)) }()
	eng, err := idem.New(st, idem.Options{Lease: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	effects := map[string]int{}
	deliveries := 0
	c, err := consumer.New(eng, func(_ context.Context, m *consumer.Message) ([]byte, error) {
		key, _ := outbox.KeyOf(m.Header)
		mu.Lock()
		effects[key]++
		mu.Unlock()
		return nil, nil
	}, consumer.Options{
		Scope: "payments-e2e",
		Key: func(m *consumer.Message) (string, error) {
			mu.Lock()
			deliveries++
			mu.Unlock()
			return outbox.KeyOf(m.Header)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	cctx, stopConsumer := context.WithCancel(ctx)
	consumed := make(chan error, 1)
	go func() { consumed <- consume(cctx, c) }()

	// The relay: the first publish of each event reaches the broker but reports a failure,
	// as a lost confirm does; the event is published again after its backoff.
	var seen sync.Map
	flaky := outbox.PublisherFunc(func(ctx context.Context, m outbox.Message) error {
		if err := pub.Publish(ctx, m); err != nil {
			return err
		}
		if _, again := seen.LoadOrStore(m.ID, true); !again {
			return fmt.Errorf("confirm lost")
		}
		return nil
	})
	relay, err := outbox.NewRelay(st2(db, opt, t), flaky, outbox.RelayOptions{
		Interval: 10 * time.Millisecond, MinBackoff: 300 * time.Millisecond, MaxBackoff: 300 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	rctx, stopRelay := context.WithCancel(ctx)
	relayed := make(chan error, 1)
	go func() { relayed <- relay.Run(rctx) }()

	for {
		mu.Lock()
		done := len(effects) == Payments && deliveries >= 2*Payments
		mu.Unlock()
		lag, err := relay.Lag(ctx)
		if done && err == nil && lag == 0 {
			break
		}
		if ctx.Err() != nil {
			mu.Lock()
			t.Fatalf("after 90s: %d of %d payments' effects ran, %d deliveries (lag %v, %v)", len(effects), Payments, deliveries, lag, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	stopRelay()
	<-relayed
	stopConsumer()
	<-consumed
	mu.Lock()
	defer mu.Unlock()
	for i := range Payments {
		if n := effects[fmt.Sprintf("payment-%d/captured", i)]; n != 1 {
			t.Errorf("payment %d: effect ran %d times, want 1", i, n)
		}
	}
	t.Logf("%d payments, %d deliveries, every effect once", Payments, deliveries)
}

func st2(db *pgxpool.Pool, opt pgoutbox.Options, t *testing.T) *pgoutbox.Store {
	st, err := pgoutbox.New(db, opt)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

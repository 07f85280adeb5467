// Command consumer-tx charges orders from a NATS JetStream stream into PostgreSQL in
// transaction mode: each charge row is written in the same transaction as the order's idem
// record, and the message is acked only once that transaction has committed. Every order is
// published three times and two consumers share the stream; the first attempt at one order
// fails after its insert, which rolls the row back with the claim, and its redelivery charges
// it. Each order ends with exactly one row.
//
//	go run ./examples/consumer-tx
//
// It needs NATS with JetStream (IDEM_NATS_URL, default nats://127.0.0.1:4222) and PostgreSQL
// (IDEM_POSTGRES_URL, default postgres://postgres@127.0.0.1:5432/test).
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/consumer/natsjs"
	"github.com/idemkit/idem/store/pgstore"
)

type order struct {
	ID    string `json:"order_id"`
	Cents int    `json:"cents"`
}

// summary is what a run did.
type summary struct {
	Orders, Messages             int
	Charged, Duplicates, Failed  int64
	Rows, OrdersWithOneRow, Keys int
}

// run publishes orders (each copies times) to a fresh stream, consumes them with two
// consumers in transaction mode into the charges table, and counts the rows.
func run(ctx context.Context, db *pgxpool.Pool, js jetstream.JetStream, charges, idemTable string, orders, copies int) (summary, error) {
	s := summary{Orders: orders, Messages: orders * copies}
	table := pgx.Identifier{charges}.Sanitize()
	if _, err := db.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+table+` (
		id bigserial PRIMARY KEY, order_id text NOT NULL, cents int NOT NULL)`); err != nil {
		return s, err
	}
	store, err := pgstore.New(db, pgstore.Options{Table: idemTable})
	if err != nil {
		return s, err
	}
	if err := store.Migrate(ctx); err != nil {
		return s, err
	}

	// The consumer. Its runner is pgstore's TxRunner: the claim of the order's key, the
	// handler's INSERT and the stored result commit together, or not at all.
	run := fmt.Sprint(time.Now().UnixNano())
	flaky := run + "-3" // the first attempt at this order fails after its insert
	var failedOnce atomic.Bool
	var charged, duplicates, failed atomic.Int64
	c, err := consumer.New(consumer.Options{
		Runner:     pgstore.NewTxRunner(store, pgstore.TxOptions{}),
		Scope:      "billing",
		RetryDelay: 100 * time.Millisecond,
		Key: func(m *consumer.Message) (string, error) {
			var o order
			if err := json.Unmarshal(m.Body, &o); err != nil || o.ID == "" {
				return "", errors.New("not an order")
			}
			return "order/" + o.ID, nil
		},
		OnEvent: func(ev consumer.Event) {
			switch ev.Outcome {
			case consumer.OutcomeExecuted:
				charged.Add(1)
			case consumer.OutcomeReplay:
				duplicates.Add(1)
			case consumer.OutcomeFailed:
				failed.Add(1)
			}
		},
	}, func(ctx context.Context, m *consumer.Message) ([]byte, error) {
		var o order
		_ = json.Unmarshal(m.Body, &o) // the key function has parsed it already
		tx := pgstore.TxFromContext(ctx)
		var id int64
		if err := tx.QueryRow(ctx, `INSERT INTO `+table+` (order_id, cents) VALUES ($1, $2) RETURNING id`,
			o.ID, o.Cents).Scan(&id); err != nil {
			return nil, err
		}
		if o.ID == flaky && failedOnce.CompareAndSwap(false, true) {
			// Rolled back with the claim: no row, no record, and the message comes back.
			return nil, errors.New("the payment provider timed out")
		}
		return fmt.Appendf(nil, "charge %d", id), nil
	})
	if err != nil {
		return s, err
	}

	// A fresh stream for this run, and a durable consumer with explicit acks.
	stream, subject := "EXAMPLE_TX_"+run, "example.tx."+run
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{subject}}); err != nil {
		return s, err
	}
	defer func() { _ = js.DeleteStream(context.Background(), stream) }()
	cons, err := js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{
		Durable: "billing", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second,
	})
	if err != nil {
		return s, err
	}
	for range copies {
		for i := range orders {
			body, _ := json.Marshal(order{ID: fmt.Sprintf("%s-%d", run, i), Cents: 1000 + i})
			if _, err := js.Publish(ctx, subject, body); err != nil {
				return s, err
			}
		}
	}

	// Two consumers on the stream, until every message is acked.
	rctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := natsjs.Run(rctx, cons, c, natsjs.Options{Concurrency: 4}); err != nil {
				log.Print(err)
			}
		}()
	}
	deadline := time.Now().Add(time.Minute)
	for charged.Load()+duplicates.Load() < int64(s.Messages) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	wg.Wait()
	s.Charged, s.Duplicates, s.Failed = charged.Load(), duplicates.Load(), failed.Load()

	err = db.QueryRow(ctx, `SELECT count(*) FILTER (WHERE n = 1), coalesce(sum(n), 0) FROM (
		SELECT count(*) AS n FROM `+table+` WHERE order_id LIKE $1 GROUP BY order_id) o`, run+"-%").
		Scan(&s.OrdersWithOneRow, &s.Rows)
	if err != nil {
		return s, err
	}
	err = db.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{idemTable}.Sanitize()+` WHERE key LIKE $1`,
		idem.ScopedKey("billing", "order/"+run+"-%")).Scan(&s.Keys)
	return s, err
}

func main() {
	ctx := context.Background()
	db, err := pgxpool.New(ctx, cmp.Or(os.Getenv("IDEM_POSTGRES_URL"), "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	nc, err := nats.Connect(cmp.Or(os.Getenv("IDEM_NATS_URL"), nats.DefaultURL))
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	s, err := run(ctx, db, js, "example_tx_charges", "example_tx_idem", 10, 3)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%d messages for %d orders: %d charged, %d duplicates skipped, %d failed attempt rolled back and redelivered\n",
		s.Messages, s.Orders, s.Charged, s.Duplicates, s.Failed)
	fmt.Printf("%d charge rows, %d orders with exactly one, %d idem records\n", s.Rows, s.OrdersWithOneRow, s.Keys)
}

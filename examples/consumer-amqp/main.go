// Command consumer-amqp charges orders from a RabbitMQ queue into PostgreSQL, once per order,
// although every order is published three times (a producer retrying, each time with a new
// message id) and two consumers share the queue.
//
//	go run ./examples/consumer-amqp
//
// It needs RabbitMQ (IDEM_AMQP_URL, default amqp://guest:guest@127.0.0.1:5672/) and PostgreSQL
// (IDEM_POSTGRES_URL, default postgres://postgres@127.0.0.1:5432/test). The idem records live
// in PostgreSQL too (pgstore), so any number of consumer processes can share them.
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

	"github.com/jackc/pgx/v5/pgxpool"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/consumer/amqp"
	"github.com/idemkit/idem/store/pgstore"
)

type order struct {
	ID    string `json:"order_id"`
	Cents int    `json:"cents"`
}

func main() {
	ctx := context.Background()
	amqpURL := cmp.Or(os.Getenv("IDEM_AMQP_URL"), "amqp://guest:guest@127.0.0.1:5672/")
	pgURL := cmp.Or(os.Getenv("IDEM_POSTGRES_URL"), "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")

	// PostgreSQL: the charges table (the effect) and the idem records (pgstore).
	db, err := pgxpool.New(ctx, pgURL)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(ctx, `CREATE TABLE IF NOT EXISTS example_charges (
		order_id text NOT NULL, cents int NOT NULL, charged_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		log.Fatal(err)
	}
	store, err := pgstore.New(db, pgstore.Options{Table: "example_idem"})
	if err != nil {
		log.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	engine, err := idem.New(store, idem.Options{})
	if err != nil {
		log.Fatal(err)
	}

	// The consumer: keyed on the order id, never on the message's stream sequence.
	var charged, skipped atomic.Int64
	c, err := consumer.New(consumer.Options{
		Runner: engine,
		Scope:  "billing",
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
				skipped.Add(1)
			}
		},
	}, func(ctx context.Context, m *consumer.Message) ([]byte, error) {
		var o order
		_ = json.Unmarshal(m.Body, &o) // the key function has parsed it already
		if _, err := db.Exec(ctx, "INSERT INTO example_charges (order_id, cents) VALUES ($1, $2)", o.ID, o.Cents); err != nil {
			return nil, err // released: the redelivery charges
		}
		return []byte("charge-" + o.ID), nil
	})
	if err != nil {
		log.Fatal(err)
	}

	// RabbitMQ: a fresh queue for this run.
	conn, err := amqp091.Dial(amqpURL)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	pub, err := conn.Channel()
	if err != nil {
		log.Fatal(err)
	}
	run := fmt.Sprintf("%d", time.Now().UnixNano())
	queue := "example-orders-" + run
	if _, err := pub.QueueDeclare(queue, true, false, false, false, nil); err != nil {
		log.Fatal(err)
	}
	defer func() { _, _ = pub.QueueDelete(queue, false, false, false) }()

	// Ten orders, each published three times with a new message id.
	const orders, copies = 10, 3
	for k := range copies {
		for i := range orders {
			body, _ := json.Marshal(order{ID: run + "-" + fmt.Sprint(i), Cents: 1000 + i})
			if err := pub.PublishWithContext(ctx, "", queue, false, false, amqp091.Publishing{
				Body: body, MessageId: fmt.Sprintf("%s-%d-%d", run, i, k), DeliveryMode: amqp091.Persistent,
			}); err != nil {
				log.Fatal(err)
			}
		}
	}

	// Two consumers on the queue, each on its own channel, until every message is settled.
	rctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for range 2 {
		ch, err := conn.Channel()
		if err != nil {
			log.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := amqp.Run(rctx, ch, queue, c, amqp.Options{Concurrency: 4}); err != nil {
				log.Print(err)
			}
		}()
	}
	deadline := time.Now().Add(time.Minute)
	for charged.Load()+skipped.Load() < orders*copies && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	wg.Wait()

	var rows int
	if err := db.QueryRow(ctx, "SELECT count(*) FROM example_charges WHERE order_id LIKE $1", run+"-%").Scan(&rows); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%d messages: %d orders charged, %d duplicates skipped; %d charges in PostgreSQL\n",
		orders*copies, charged.Load(), skipped.Load(), rows)
}

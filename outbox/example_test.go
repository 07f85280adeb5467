package outbox_test

import (
	"context"
	"log"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/outbox"
	"github.com/idemkit/idem/outbox/natsout"
	"github.com/idemkit/idem/outbox/pgoutbox"
	"github.com/idemkit/idem/store/pgstore"
)

// A payment and the event announcing it commit in one transaction (here the one pgstore's
// transaction mode opens for the request), and a relay publishes the event to NATS.
func Example() {
	ctx := context.Background()
	db, err := pgxpool.New(ctx, "postgres://app@db/payments")
	if err != nil {
		log.Fatal(err)
	}
	if err := pgoutbox.Migrate(ctx, db, pgoutbox.Options{}); err != nil {
		log.Fatal(err)
	}

	// In the handler, inside the request's transaction:
	capture := func(w http.ResponseWriter, r *http.Request) {
		tx := pgstore.TxFromContext(r.Context())
		if _, err := tx.Exec(r.Context(), `UPDATE payments SET captured = true WHERE id = $1`, 42); err != nil {
			http.Error(w, "not captured", http.StatusInternalServerError) // rolls back: no event either
			return
		}
		err := pgoutbox.Add(r.Context(), tx, pgoutbox.Options{}, outbox.Message{
			Key:      "payment-42/captured", // the fact, so every copy of the event has this key
			OrderKey: "payment-42",          // the payment's events are published in order
			Topic:    "payments.captured",
			Body:     []byte(`{"payment":42}`),
		})
		if err != nil {
			http.Error(w, "not captured", http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}
	_ = capture

	// In every process (or a dedicated one), the relay:
	nc, err := nats.Connect(nats.DefaultURL)
	if err != nil {
		log.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	pub, err := natsout.New(js, "payments-outbox")
	if err != nil {
		log.Fatal(err)
	}
	st, err := pgoutbox.New(db, pgoutbox.Options{})
	if err != nil {
		log.Fatal(err)
	}
	relay, err := outbox.NewRelay(st, pub, outbox.RelayOptions{MaxBackoff: 30 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	go func() { _ = relay.Run(ctx) }()
}

// A consumer takes the event's key from the header the publishers set.
func ExampleKeyOf() {
	opt := consumer.Options{
		Scope: "ledger",
		Key:   func(m *consumer.Message) (string, error) { return outbox.KeyOf(m.Header) },
	}
	_ = opt
}

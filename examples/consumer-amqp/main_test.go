package main

import (
	"context"
	"testing"
	"time"

	"github.com/idemkit/idem/examples/internal/runmain"
	"github.com/idemkit/idem/internal/testenv"
)

// The example as `go run ./examples/consumer-amqp` runs it, on RabbitMQ and PostgreSQL: every
// order published three times is charged once, by two consumers sharing the queue.
func TestEveryOrderChargedOnce(t *testing.T) {
	amqpURL, pgURL := testenv.AMQPURL(t), testenv.PostgresURL(t)
	if amqpURL == "" || pgURL == "" {
		return
	}
	url, db := runmain.PostgresSchema(t, pgURL)
	t.Setenv("IDEM_AMQP_URL", amqpURL)
	t.Setenv("IDEM_POSTGRES_URL", url)

	out := runmain.Run(t, 2*time.Minute, main)
	if want := "30 messages: 10 orders charged, 20 duplicates skipped; 10 charges in PostgreSQL\n"; out != want {
		t.Errorf("output %q, want %q", out, want)
	}
	var rows, orders int
	if err := db.QueryRow(context.Background(), "SELECT count(*), count(DISTINCT order_id) FROM example_charges").Scan(&rows, &orders); err != nil {
		t.Fatal(err)
	}
	if rows != 10 || orders != 10 {
		t.Errorf("%d charges of %d orders in PostgreSQL, want 10 of 10", rows, orders)
	}
}

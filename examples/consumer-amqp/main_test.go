package main

import (
	"testing"

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
	runmain.ChargedOnce(t, pgURL, main, "30 messages: 10 orders charged, 20 duplicates skipped; 10 charges in PostgreSQL\n", 10,
		"IDEM_AMQP_URL", amqpURL)
}

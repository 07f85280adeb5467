package main

import (
	"testing"

	"github.com/idemkit/idem/examples/internal/runmain"
	"github.com/idemkit/idem/internal/testenv"
)

// The example as `go run ./examples/consumer-nats` runs it, on JetStream and PostgreSQL: every
// order published three times is charged once, by two consumers sharing the stream.
func TestEveryOrderChargedOnce(t *testing.T) {
	natsURL, pgURL := testenv.NATSURL(t), testenv.PostgresURL(t)
	if natsURL == "" || pgURL == "" {
		return
	}
	runmain.ChargedOnce(t, pgURL, main, "30 messages: 10 orders charged, 20 duplicates skipped; 10 charges in PostgreSQL\n", 10,
		"IDEM_NATS_URL", natsURL)
}

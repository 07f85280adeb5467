package main

import (
	"testing"

	"github.com/idemkit/idem/examples/internal/runmain"
	"github.com/idemkit/idem/internal/testenv"
)

// The example as `go run ./examples/consumer-sqs` runs it, on the SQS/SNS endpoint and
// PostgreSQL: every order published twice and fanned out to two queues is charged once.
func TestEveryOrderChargedOnce(t *testing.T) {
	endpoint := testenv.Service(t, "SQS (fauxqs)", "IDEM_SQS_ENDPOINT", "http://127.0.0.1:4566", testenv.HostPort("4566"))
	pgURL := testenv.PostgresURL(t)
	if endpoint == "" || pgURL == "" {
		return
	}
	runmain.ChargedOnce(t, pgURL, main, "40 messages: 10 orders charged, 30 duplicates skipped; 10 charges in PostgreSQL\n", 10,
		"IDEM_SQS_ENDPOINT", endpoint)
}

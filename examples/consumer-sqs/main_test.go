package main

import (
	"context"
	"testing"
	"time"

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
	url, db := runmain.PostgresSchema(t, pgURL)
	t.Setenv("IDEM_SQS_ENDPOINT", endpoint)
	t.Setenv("IDEM_POSTGRES_URL", url)

	out := runmain.Run(t, 2*time.Minute, main)
	if want := "40 messages: 10 orders charged, 30 duplicates skipped; 10 charges in PostgreSQL\n"; out != want {
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

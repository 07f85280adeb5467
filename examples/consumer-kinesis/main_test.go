package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awskinesis "github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/internal/testenv"
)

// Every payment put twice, read by a worker killed halfway and two that take over from its
// checkpoints on kinesalite: each payment has exactly one ledger row.
func TestEveryPaymentBookedOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test (kinesalite, PostgreSQL); skipped with -short")
	}
	ep := testenv.Service(t, "Kinesis (kinesalite)", "IDEM_KINESIS_ENDPOINT", "http://127.0.0.1:4567", testenv.HostPort("4567"))
	pgURL := testenv.PostgresURL(t)
	if ep == "" || pgURL == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	db, err := pgxpool.New(ctx, pgURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	client := localClient(ep)
	var b [5]byte
	_, _ = rand.Read(b[:])
	sfx := hex.EncodeToString(b[:])
	tb := tables{Ledger: "example_kinesis_ledger_" + sfx, Idem: "example_kinesis_idem_" + sfx,
		Checkpoints: "example_kinesis_cps_" + sfx, Stream: "example-payments-" + sfx}
	t.Cleanup(func() {
		for _, name := range []string{tb.Ledger, tb.Idem, tb.Checkpoints} {
			_, _ = db.Exec(context.Background(), `DROP TABLE IF EXISTS `+pgx.Identifier{name}.Sanitize())
		}
		_, _ = client.DeleteStream(context.Background(), &awskinesis.DeleteStreamInput{StreamName: aws.String(tb.Stream)})
	})
	const payments = 30
	s, err := run(ctx, db, client, tb, payments)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", s)
	if s.Rows != payments || s.PaymentsWithOneRow != payments {
		t.Errorf("%d ledger rows, %d payments with exactly one; want %d of each", s.Rows, s.PaymentsWithOneRow, payments)
	}
	// A record whose commit the kill interrupted is booked without an "executed" event; one
	// per shard at most. More bookings than payments is a payment booked twice.
	if s.Booked > payments || s.Booked < payments-2 {
		t.Errorf("%d payments booked, want %d (%d at least, were the kill to interrupt a commit on each shard)", s.Booked, payments, payments-2)
	}
	if s.Replays < payments {
		t.Errorf("%d replays, want at least %d (every payment was put twice)", s.Replays, payments)
	}
}

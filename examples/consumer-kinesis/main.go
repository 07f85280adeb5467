// Command consumer-kinesis books payments from a Kinesis data stream into PostgreSQL, each
// once, with long-running workers (outside Lambda): consumer/kinesis reads the shards in order
// from checkpoints kept in PostgreSQL (consumer/pgcheckpoints), and each ledger row is written
// in the same transaction as the payment's idem record (pgstore.TxRunner).
//
// A stream delivers more than once in two ways, and the run shows both: the producer puts each
// payment twice (a retried PutRecord whose answer was lost: two sequence numbers, one fact),
// and the first worker is killed mid-stream, so its successors read again from its last
// checkpoint. The key is the payment id in the record's data, so either copy replays.
//
//	go run ./examples/consumer-kinesis
//
// It needs a Kinesis endpoint (IDEM_KINESIS_ENDPOINT, default http://127.0.0.1:4567, where
// kinesalite listens; `make services` starts it) and PostgreSQL (IDEM_POSTGRES_URL, default
// postgres://postgres@127.0.0.1:5432/test). On AWS, build the client with
// kinesis.NewFromConfig(cfg) instead.
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awskinesis "github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/consumer/kinesis"
	"github.com/idemkit/idem/consumer/pgcheckpoints"
	"github.com/idemkit/idem/store/pgstore"
)

// payment is a record's data.
type payment struct {
	ID    string `json:"payment_id"`
	Cents int    `json:"cents"`
}

// summary is what a run did.
type summary struct {
	Payments, Records           int
	Booked, Replays             int64
	Rows, PaymentsWithOneRow    int
	KilledAfter, WorkersStarted int
}

// tables are the PostgreSQL tables and the stream one run uses.
type tables struct{ Ledger, Idem, Checkpoints, Stream string }

// run puts payments (each twice) into a new stream of two shards, books them with a worker that
// is killed halfway and two that take over, and counts the ledger's rows.
func run(ctx context.Context, db *pgxpool.Pool, client *awskinesis.Client, t tables, payments int) (summary, error) {
	s := summary{Payments: payments, Records: 2 * payments}
	ledger := pgx.Identifier{t.Ledger}.Sanitize()
	if _, err := db.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+ledger+` (
		id bigserial PRIMARY KEY, payment_id text NOT NULL, cents int NOT NULL)`); err != nil {
		return s, err
	}
	store, err := pgstore.New(db, pgstore.Options{Table: t.Idem})
	if err != nil {
		return s, err
	}
	if err := store.Migrate(ctx); err != nil {
		return s, err
	}
	cps, err := pgcheckpoints.New(db, pgcheckpoints.Options{Table: t.Checkpoints, Application: "ledger"})
	if err != nil {
		return s, err
	}
	if err := cps.Migrate(ctx); err != nil {
		return s, err
	}

	// The producer: a stream of two shards, each payment put twice.
	if err := createStream(ctx, client, t.Stream, 2); err != nil {
		return s, err
	}
	run := fmt.Sprint(time.Now().UnixNano())
	last := map[string]string{} // each shard's last sequence number
	for i := range payments {
		data, _ := json.Marshal(payment{ID: fmt.Sprintf("%s-%d", run, i), Cents: 1000 + i})
		for range 2 {
			out, err := client.PutRecord(ctx, &awskinesis.PutRecordInput{StreamName: aws.String(t.Stream),
				Data: data, PartitionKey: aws.String(fmt.Sprint(i))})
			if err != nil {
				return s, err
			}
			last[aws.ToString(out.ShardId)] = aws.ToString(out.SequenceNumber)
		}
	}

	// The consumer: the key is the payment id, and the ledger row commits with its record.
	var booked, replays atomic.Int64
	c, err := consumer.New(consumer.Options{
		Runner: pgstore.NewTxRunner(store, pgstore.TxOptions{}),
		Scope:  "ledger",
		Key: func(m *consumer.Message) (string, error) {
			var p payment
			if err := json.Unmarshal(m.Body, &p); err != nil || p.ID == "" {
				return "", errors.New("not a payment")
			}
			return "payment/" + p.ID, nil
		},
		OnEvent: func(ev consumer.Event) {
			switch ev.Outcome {
			case consumer.OutcomeExecuted:
				booked.Add(1)
			case consumer.OutcomeReplay:
				replays.Add(1)
			}
		},
	}, func(ctx context.Context, m *consumer.Message) ([]byte, error) {
		var p payment
		_ = json.Unmarshal(m.Body, &p) // the key function has parsed it already
		_, err := pgstore.TxFromContext(ctx).Exec(ctx, `INSERT INTO `+ledger+` (payment_id, cents) VALUES ($1, $2)`, p.ID, p.Cents)
		return nil, err
	})
	if err != nil {
		return s, err
	}
	start := func() (*kinesis.Worker, error) {
		s.WorkersStarted++
		return kinesis.Start(ctx, c, kinesis.Options{Client: client, Stream: t.Stream, Checkpoints: cps,
			PollInterval: 100 * time.Millisecond, LeaseDuration: 2 * time.Second,
			Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))})
	}

	// One worker, killed (no checkpoint saved from then on) once it has booked half.
	first, err := start()
	if err != nil {
		return s, err
	}
	wait(func() bool { return booked.Load() >= int64(payments/2) })
	first.Kill()
	s.KilledAfter = int(booked.Load())

	// Two workers take over from the checkpoints, once the killed one's leases run out.
	for range 2 {
		w, err := start()
		if err != nil {
			return s, err
		}
		defer w.Stop()
	}
	// They are done when every shard's checkpoint is its last record: a checkpoint is saved
	// once its record is handled. (The count of bookings cannot say so: a booking whose commit
	// the kill interrupted may be in the ledger without an "executed" event.)
	wait(func() bool {
		for shard, seq := range last {
			if cp, err := cps.Checkpoint(ctx, shard); err != nil || cp != seq {
				return false
			}
		}
		return true
	})
	s.Booked, s.Replays = booked.Load(), replays.Load()

	err = db.QueryRow(ctx, `SELECT count(*) FILTER (WHERE n = 1), coalesce(sum(n), 0) FROM (
		SELECT count(*) AS n FROM `+ledger+` WHERE payment_id LIKE $1 GROUP BY payment_id) p`, run+"-%").
		Scan(&s.PaymentsWithOneRow, &s.Rows)
	return s, err
}

// wait polls ok for up to a minute.
func wait(ok func() bool) {
	for deadline := time.Now().Add(time.Minute); !ok() && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
}

// createStream creates the stream if it does not exist and waits until it is active.
func createStream(ctx context.Context, client *awskinesis.Client, name string, shards int32) error {
	_, err := client.CreateStream(ctx, &awskinesis.CreateStreamInput{StreamName: aws.String(name), ShardCount: aws.Int32(shards)})
	var exists *types.ResourceInUseException
	if err != nil && !errors.As(err, &exists) {
		return err
	}
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		d, err := client.DescribeStreamSummary(ctx, &awskinesis.DescribeStreamSummaryInput{StreamName: aws.String(name)})
		if err == nil && d.StreamDescriptionSummary.StreamStatus == types.StreamStatusActive {
			return nil
		}
	}
	return fmt.Errorf("stream %s did not become active", name)
}

// localClient is a client of a Kinesis-compatible server, such as kinesalite, at endpoint.
func localClient(endpoint string) *awskinesis.Client {
	return awskinesis.New(awskinesis.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(endpoint),
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: "local", SecretAccessKey: "local"}, nil
		}),
	})
}

func main() {
	ctx := context.Background()
	db, err := pgxpool.New(ctx, cmp.Or(os.Getenv("IDEM_POSTGRES_URL"), "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	client := localClient(cmp.Or(os.Getenv("IDEM_KINESIS_ENDPOINT"), "http://127.0.0.1:4567"))
	stream := fmt.Sprintf("example-payments-%d", time.Now().Unix()) // a new stream for each run
	defer func() { _, _ = client.DeleteStream(ctx, &awskinesis.DeleteStreamInput{StreamName: aws.String(stream)}) }()
	s, err := run(ctx, db, client, tables{Ledger: "example_kinesis_ledger", Idem: "example_kinesis_idem",
		Checkpoints: "example_kinesis_checkpoints", Stream: stream}, 20)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%d records for %d payments: %d booked (%d before the first worker was killed), %d replays\n",
		s.Records, s.Payments, s.Booked, s.KilledAfter, s.Replays)
	fmt.Printf("%d ledger rows, %d payments with exactly one\n", s.Rows, s.PaymentsWithOneRow)
}

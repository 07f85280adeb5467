// Command consumer-sqs charges orders from SQS into PostgreSQL, once per order, although every
// order arrives four times: the producer publishes it twice to an SNS topic (a retry, each time
// a new SNS message), and the topic fans out to two queues that billing reads (one with raw
// delivery, one with SNS envelopes), each delivery with its own SQS message id.
//
//	go run ./examples/consumer-sqs
//
// It needs an SQS/SNS endpoint (IDEM_SQS_ENDPOINT, default http://127.0.0.1:4566, the fauxqs
// server that `make services` starts) and PostgreSQL (IDEM_POSTGRES_URL, default
// postgres://postgres@127.0.0.1:5432/test). The idem records live in PostgreSQL too (pgstore),
// so any number of worker processes can share them.
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

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/consumer/sqs"
	"github.com/idemkit/idem/store/pgstore"
)

type order struct {
	ID    string `json:"order_id"`
	Cents int    `json:"cents"`
}

func main() {
	ctx := context.Background()
	endpoint := cmp.Or(os.Getenv("IDEM_SQS_ENDPOINT"), "http://127.0.0.1:4566")
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

	// The consumer: keyed on the order id, never on the SQS or SNS message id.
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

	// SQS and SNS: a topic fanned out to two fresh queues for this run.
	cfg := sqs.Config(sqs.ConfigOptions{Endpoint: endpoint})
	sqsClient, snsClient := awssqs.NewFromConfig(cfg), sns.NewFromConfig(cfg)
	run := fmt.Sprintf("%d", time.Now().UnixNano())
	topic, err := snsClient.CreateTopic(ctx, &sns.CreateTopicInput{Name: aws.String("example-orders-" + run)})
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _, _ = snsClient.DeleteTopic(ctx, &sns.DeleteTopicInput{TopicArn: topic.TopicArn}) }()
	var queues []string
	for _, raw := range []bool{true, false} {
		name := fmt.Sprintf("example-billing-%s-raw-%v", run, raw)
		q, err := sqsClient.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String(name)})
		if err != nil {
			log.Fatal(err)
		}
		defer func() { _, _ = sqsClient.DeleteQueue(ctx, &awssqs.DeleteQueueInput{QueueUrl: q.QueueUrl}) }()
		at, err := sqsClient.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{QueueUrl: q.QueueUrl,
			AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn}})
		if err != nil {
			log.Fatal(err)
		}
		if _, err := snsClient.Subscribe(ctx, &sns.SubscribeInput{TopicArn: topic.TopicArn, Protocol: aws.String("sqs"),
			Endpoint:   aws.String(at.Attributes["QueueArn"]),
			Attributes: map[string]string{"RawMessageDelivery": fmt.Sprint(raw)}}); err != nil {
			log.Fatal(err)
		}
		queues = append(queues, *q.QueueUrl)
	}

	// Ten orders, each published twice.
	const orders, copies = 10, 2
	for range copies {
		for i := range orders {
			body, _ := json.Marshal(order{ID: run + "-" + fmt.Sprint(i), Cents: 1000 + i})
			if _, err := snsClient.Publish(ctx, &sns.PublishInput{TopicArn: topic.TopicArn, Message: aws.String(string(body))}); err != nil {
				log.Fatal(err)
			}
		}
	}

	// A worker on each queue, sharing the consumer, until every message is settled.
	rctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, url := range queues {
		w, err := sqs.NewWorker(sqsClient, c, sqs.WorkerOptions{QueueURL: url, Concurrency: 4, WaitTime: time.Second})
		if err != nil {
			log.Fatal(err)
		}
		wg.Go(func() {
			if err := w.Run(rctx); err != nil {
				log.Print(err)
			}
		})
	}
	deadline := time.Now().Add(time.Minute)
	for charged.Load()+skipped.Load() < orders*copies*2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	wg.Wait()

	var rows int
	if err := db.QueryRow(ctx, "SELECT count(*) FROM example_charges WHERE order_id LIKE $1", run+"-%").Scan(&rows); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%d messages: %d orders charged, %d duplicates skipped; %d charges in PostgreSQL\n",
		orders*copies*2, charged.Load(), skipped.Load(), rows)
}

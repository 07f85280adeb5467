package sqsout_test

import (
	"context"

	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/idemkit/idem/outbox"
	"github.com/idemkit/idem/outbox/sqsout"
)

// A relay that publishes an outbox table's events to SQS: each event's Topic is its queue's
// URL.
func ExampleNew() {
	var client *awssqs.Client // awssqs.NewFromConfig(cfg)
	var st outbox.Store       // pgoutbox.New, mysqloutbox.New, sqliteoutbox.New
	if client == nil {
		return // in a service: a real client and table
	}
	pub, err := sqsout.New(client, "payments-outbox")
	if err != nil {
		panic(err)
	}
	relay, err := outbox.NewRelay(st, pub, outbox.RelayOptions{})
	if err != nil {
		panic(err)
	}
	go relay.Run(context.Background())
}

package dynamostream_test

import (
	"context"
	"encoding/json"

	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/consumer/dynamostream"
	"github.com/idemkit/idem/store/memstore"
)

// A worker that sends each payment's receipt once, from the outbox events written in the same
// transaction as the payments: the key is the event id the writer put in the event item.
func ExampleStart() {
	var client *dynamodbstreams.Client // dynamodbstreams.NewFromConfig(cfg)
	eng, err := idem.New(memstore.New(), idem.Options{})
	if err != nil {
		panic(err)
	}
	c, err := consumer.New(consumer.Options{Runner: eng, Scope: "receipts", Key: func(m *consumer.Message) (string, error) {
		var ch struct {
			NewImage struct {
				EventID string `json:"event_id"`
			} `json:"new_image"`
		}
		return ch.NewImage.EventID, json.Unmarshal(m.Body, &ch)
	}}, func(ctx context.Context, m *consumer.Message) ([]byte, error) {
		return nil, nil // send the receipt
	})
	if err != nil {
		panic(err)
	}
	if client == nil {
		return // in a service: a real client
	}
	w, err := dynamostream.Start(context.Background(), c, dynamostream.Options{Client: client,
		StreamARN: "arn:aws:dynamodb:eu-west-1:123456789012:table/payments/stream/2026-01-01T00:00:00.000"})
	if err != nil {
		panic(err)
	}
	defer w.Stop()
}

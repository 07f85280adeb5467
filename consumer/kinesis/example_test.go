package kinesis_test

import (
	"context"
	"encoding/json"

	awskinesis "github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/consumer/kinesis"
	"github.com/idemkit/idem/store/memstore"
)

// A worker that books each payment of the "payments" stream once, keyed on the payment id in
// the record's data. Workers of one application share a Checkpoints; Stop finishes the
// records under way.
func ExampleStart() {
	var client *awskinesis.Client // awskinesis.NewFromConfig(cfg)
	eng, err := idem.New(memstore.New(), idem.Options{})
	if err != nil {
		panic(err)
	}
	c, err := consumer.New(consumer.Options{Runner: eng, Scope: "ledger", Key: func(m *consumer.Message) (string, error) {
		var p struct {
			PaymentID string `json:"payment_id"`
		}
		return p.PaymentID, json.Unmarshal(m.Body, &p)
	}}, func(ctx context.Context, m *consumer.Message) ([]byte, error) {
		return nil, nil // book the payment
	})
	if err != nil {
		panic(err)
	}
	if client == nil {
		return // in a service: a real client
	}
	w, err := kinesis.Start(context.Background(), c, kinesis.Options{Client: client, Stream: "payments",
		Checkpoints: kinesis.NewMemoryCheckpoints()})
	if err != nil {
		panic(err)
	}
	defer w.Stop()
}

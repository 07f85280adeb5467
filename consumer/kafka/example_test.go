package kafka_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/consumer/kafka"
	"github.com/idemkit/idem/store/memstore"
)

// A worker charges each order once, keyed on the order id in the record's value, however many
// times the order is published or the record is fetched.
func Example() {
	engine, err := idem.New(memstore.New(), idem.Options{})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	charge := func(ctx context.Context, m *consumer.Message) ([]byte, error) {
		// ... charge the order; return a receipt for duplicates
		return []byte("charged"), nil
	}
	c, err := consumer.New(consumer.Options{
		Runner: engine,
		Scope:  "billing",
		Key: func(m *consumer.Message) (string, error) {
			var o struct {
				ID string `json:"order_id"`
			}
			if err := json.Unmarshal(m.Body, &o); err != nil || o.ID == "" {
				return "", fmt.Errorf("no order id in %q", m.Body)
			}
			return "order/" + o.ID, nil
		},
	}, charge)
	if err != nil {
		log.Fatal(err)
	}
	w, err := kafka.NewWorker(c, kafka.Options{},
		kgo.SeedBrokers("127.0.0.1:9092"),
		kgo.ConsumerGroup("billing"),
		kgo.ConsumeTopics("orders"),
	)
	if err != nil {
		log.Fatal(err)
	}
	// Run consumes until ctx is done, then commits and leaves the group.
	if err := w.Run(ctx); err != nil {
		log.Fatal(err)
	}
}

// When producers key records by the business id, the key function can use the record key.
func ExampleKeyHeader() {
	key := func(m *consumer.Message) (string, error) {
		if k := m.Header[kafka.KeyHeader]; len(k) == 1 && k[0] != "" {
			return "order/" + k[0], nil
		}
		return "", fmt.Errorf("record %s has no key", m.ID)
	}
	k, _ := key(kafka.Message(&kgo.Record{Topic: "orders", Partition: 0, Offset: 7, Key: []byte("o-42")}))
	fmt.Println(k)
	// Output: order/o-42
}

package kafkaout_test

import (
	"context"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemkit/idem/outbox"
	"github.com/idemkit/idem/outbox/kafkaout"
)

// A relay that publishes an outbox table's events to Kafka: each event's Topic is its Kafka
// topic, its key the record's key.
func ExampleNew() {
	var st outbox.Store // pgoutbox.New, mysqloutbox.New, sqliteoutbox.New
	if st == nil {
		return // in a service: a real table
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:9092"))
	if err != nil {
		panic(err)
	}
	defer cl.Close()
	pub, err := kafkaout.New(cl)
	if err != nil {
		panic(err)
	}
	relay, err := outbox.NewRelay(st, pub, outbox.RelayOptions{})
	if err != nil {
		panic(err)
	}
	_ = relay.Run(context.Background())
}

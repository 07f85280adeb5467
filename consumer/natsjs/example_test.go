package natsjs_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"os/signal"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/consumer/natsjs"
	"github.com/idemkit/idem/store/memstore"
)

// Consume a stream of orders until interrupted, charging each order once whatever the number
// of deliveries. (It needs a NATS server, so it is compiled but not run.)
func ExampleRun() {
	nc, err := nats.Connect(nats.DefaultURL)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	cons, err := js.CreateOrUpdateConsumer(ctx, "ORDERS", jetstream.ConsumerConfig{
		Durable: "billing", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second,
	})
	if err != nil {
		log.Fatal(err)
	}
	engine, _ := idem.New(memstore.New(), idem.Options{}) // share a real store between processes
	c, err := consumer.New(consumer.Options{
		Runner: engine,
		Scope:  "billing",
		Key: func(m *consumer.Message) (string, error) {
			var o struct {
				ID string `json:"order_id"`
			}
			if err := json.Unmarshal(m.Body, &o); err != nil || o.ID == "" {
				return "", fmt.Errorf("no order id")
			}
			return "order/" + o.ID, nil
		},
	}, func(ctx context.Context, m *consumer.Message) ([]byte, error) {
		return []byte("charged"), nil // charge the order here
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := natsjs.Run(ctx, cons, c, natsjs.Options{Concurrency: 16}); err != nil {
		log.Fatal(err)
	}
}

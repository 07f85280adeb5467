package amqp_test

import (
	"context"
	"encoding/json"
	"errors"
	"log"
	"os"
	"os/signal"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/consumer/amqp"
	"github.com/idemkit/idem/store/memstore"
)

// Consume a queue of orders until interrupted, charging each order once whatever the number
// of deliveries. (It needs a RabbitMQ server, so it is compiled but not run.)
func ExampleRun() {
	conn, err := amqp091.Dial("amqp://guest:guest@127.0.0.1:5672/")
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
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
				return "", errors.New("no order id")
			}
			return "order/" + o.ID, nil
		},
	}, func(ctx context.Context, m *consumer.Message) ([]byte, error) {
		return nil, nil // charge the order here
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := amqp.Run(ctx, ch, "orders", c, amqp.Options{Concurrency: 16}); err != nil {
		log.Fatal(err)
	}
}

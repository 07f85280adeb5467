package redisstream_test

import (
	"context"
	"fmt"
	"log"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/consumer/redisstream"
	"github.com/idemkit/idem/store/memstore"
)

// A worker charges each order once, keyed on the entry's order_id field, however many times
// the order is added to the stream or its entry is delivered.
func Example() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()
	engine, err := idem.New(memstore.New(), idem.Options{})
	if err != nil {
		log.Fatal(err)
	}
	charge := func(ctx context.Context, m *consumer.Message) ([]byte, error) {
		// ... charge the order; return a receipt for duplicates
		return []byte("charged"), nil
	}
	c, err := consumer.New(consumer.Options{
		Runner: engine,
		Scope:  "billing",
		Key: func(m *consumer.Message) (string, error) {
			if id := m.Header["order_id"]; len(id) == 1 && id[0] != "" {
				return "order/" + id[0], nil
			}
			return "", fmt.Errorf("entry %s has no order_id", m.ID)
		},
	}, charge)
	if err != nil {
		log.Fatal(err)
	}
	w, err := redisstream.NewWorker(rdb, c, redisstream.Options{Stream: "orders", Group: "billing"})
	if err != nil {
		log.Fatal(err)
	}
	// Run consumes until ctx is done, then finishes and acks the entries under way.
	if err := w.Run(context.Background()); err != nil {
		log.Fatal(err)
	}
}

// The fields of an entry other than the body are the Message's Header.
func ExampleMessage() {
	m := redisstream.Message(redis.XMessage{ID: "1700000000000-0", Values: map[string]any{
		"body": `{"cents":1200}`, "order_id": "o-42",
	}}, "body")
	fmt.Println(m.ID, m.Header["order_id"][0], string(m.Body))
	// Output: 1700000000000-0 o-42 {"cents":1200}
}

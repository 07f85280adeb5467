package consumer_test

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/store/memstore"
)

// The same order arrives three times with three transport ids (a producer's retry, a
// redelivery after a lost ack): keyed on the order id, it is charged once, and duplicates get
// the stored receipt.
func Example() {
	engine, _ := idem.New(memstore.New(), idem.Options{})
	charges := 0
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
	}, func(ctx context.Context, m *consumer.Message) ([]byte, error) {
		charges++
		return []byte("receipt-1"), nil
	})
	if err != nil {
		panic(err)
	}
	for _, id := range []string{"msg-a", "msg-b", "msg-c"} {
		r := c.Handle(context.Background(), &consumer.Message{ID: id, Body: []byte(`{"order_id":"1001","cents":4200}`)})
		fmt.Println(id, r.Outcome, r.Outcome.Ack(), string(r.Output))
	}
	r := c.Handle(context.Background(), &consumer.Message{ID: "msg-d", Body: []byte(`{"cents":1}`)})
	fmt.Println("msg-d", r.Outcome, r.Outcome.Ack())
	fmt.Println("charges:", charges)
	// Output:
	// msg-a executed true receipt-1
	// msg-b replay true receipt-1
	// msg-c replay true receipt-1
	// msg-d rejected false
	// charges: 1
}

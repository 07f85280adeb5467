package idemlambda_test

import (
	"context"
	"fmt"

	"github.com/aws/aws-lambda-go/events"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/idemlambda"
	"github.com/idemkit/idem/store/memstore"
)

// A Kinesis batch whose third record fails: the response reports it and the record after it,
// so Lambda retries from there. On the retry the whole batch comes back (as after a timeout):
// the records done before are duplicates and are not booked again.
func ExampleKinesisHandler() {
	eng, err := idem.New(memstore.New(), idem.Options{})
	if err != nil {
		panic(err)
	}
	key, err := idemlambda.BodyKey("payment_id")
	if err != nil {
		panic(err)
	}
	down := true // the ledger is down for the first try of p-3
	c, err := consumer.New(consumer.Options{Runner: eng, Key: key, Scope: "ledger"}, func(ctx context.Context, m *consumer.Message) ([]byte, error) {
		if string(m.Body) == `{"payment_id":"p-3"}` && down {
			down = false
			return nil, fmt.Errorf("ledger unavailable")
		}
		fmt.Println("booked", string(m.Body))
		return nil, nil
	})
	if err != nil {
		panic(err)
	}
	h, err := idemlambda.KinesisHandler(c)
	if err != nil {
		panic(err)
	}
	var batch events.KinesisEvent
	for i := 1; i <= 4; i++ {
		batch.Records = append(batch.Records, events.KinesisEventRecord{EventID: "shardId-000000000000:" + fmt.Sprint(i),
			Kinesis: events.KinesisRecord{SequenceNumber: fmt.Sprint(i), Data: []byte(fmt.Sprintf(`{"payment_id":"p-%d"}`, i))}})
	}
	resp, _ := h(context.Background(), batch)
	fmt.Println("failures:", resp.BatchItemFailures)
	resp, _ = h(context.Background(), batch)
	fmt.Println("failures:", resp.BatchItemFailures)
	// Output:
	// booked {"payment_id":"p-1"}
	// booked {"payment_id":"p-2"}
	// failures: [{3} {4}]
	// booked {"payment_id":"p-3"}
	// booked {"payment_id":"p-4"}
	// failures: []
}

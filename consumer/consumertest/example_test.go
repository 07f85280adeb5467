package consumertest_test

import (
	"context"
	"testing"

	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/consumer/consumertest"
)

// myBroker stands for an adapter's test broker; see consumer/natsjs and consumer/amqp for
// real ones.
type myBroker struct{}

func (myBroker) NewQueue(t testing.TB) consumertest.Queue { return myQueue{} }

type myQueue struct{}

func (myQueue) Publish(ctx context.Context, body []byte) error { return nil }
func (myQueue) Start(ctx context.Context, c *consumer.Consumer, crash func() bool) (consumertest.Worker, error) {
	return nil, nil
}
func (myQueue) Pending(ctx context.Context) (int, error) { return 0, nil }

// An adapter's conformance test is a broker and a call; its benchmark likewise.
func Example() {
	_ = func(t *testing.T) { consumertest.Run(t, myBroker{}, consumertest.Options{}) }
	_ = func(b *testing.B) { consumertest.Throughput(b, myBroker{}, consumertest.BenchOptions{}) }
}

package idemotel_test

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/idemotel"
	"github.com/idemkit/idem/store/memstore"
)

// A consumer continues the trace of the producer that published the message: the producer
// puts TraceHeaders in the message's headers (here the Header an adapter would fill from NATS
// headers, AMQP headers, SQS message attributes or Kafka record headers), and ConsumerTrace
// reads them back.
func ExampleConsumerTrace() {
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	defer tp.Shutdown(context.Background())
	o := idemotel.Options{TracerProvider: tp, Propagator: propagation.TraceContext{}, Key: idemotel.ConsumerKey("billing")}

	// The producer's side: its span's context, as message headers.
	ctx, publish := tp.Tracer("producer").Start(context.Background(), "publish")
	header := map[string][]string{}
	for k, v := range idemotel.TraceHeaders(ctx, o) {
		header[k] = []string{v}
	}
	publish.End()

	// The consumer's side.
	obs, err := idemotel.Observer(o)
	if err != nil {
		panic(err)
	}
	eng, err := idem.New(memstore.New(), idem.Options{Observer: obs})
	if err != nil {
		panic(err)
	}
	c, err := consumer.New(consumer.Options{
		Runner: eng,
		Scope:  "billing",
		Key:    func(m *consumer.Message) (string, error) { return "order-42", nil },
		Trace:  idemotel.ConsumerTrace(o),
	}, func(context.Context, *consumer.Message) ([]byte, error) { return nil, nil })
	if err != nil {
		panic(err)
	}
	c.Handle(context.Background(), &consumer.Message{Body: []byte(`{"order":"order-42"}`), Header: header})

	for _, s := range spans.Ended() {
		same := s.SpanContext().TraceID() == publish.SpanContext().TraceID()
		fmt.Println(s.Name(), "in the producer's trace:", same)
	}
	// Output:
	// publish in the producer's trace: true
	// idem.claim in the producer's trace: true
	// idem.complete in the producer's trace: true
	// idem.effect in the producer's trace: true
	// idem.consume in the producer's trace: true
}

package idemotel_test

import (
	"context"
	"fmt"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemotel"
	"github.com/idemkit/idem/outbox"
	"github.com/idemkit/idem/store/memstore"
)

// An engine traced with the OpenTelemetry SDK: the first call claims the key and runs the
// effect, the second replays it.
func Example() {
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	defer tp.Shutdown(context.Background())

	obs, err := idemotel.Observer(idemotel.Options{TracerProvider: tp, Store: "memory"})
	if err != nil {
		panic(err)
	}
	eng, err := idem.New(memstore.New(), idem.Options{Observer: obs})
	if err != nil {
		panic(err)
	}
	charge := func(context.Context) (idem.Response, error) {
		return idem.Response{Status: 201, Body: []byte(`{"id":"ch_1"}`)}, nil
	}
	fp := idem.Fingerprint([]byte("POST /charges amount=1000"))
	for range 2 {
		if _, err := eng.Do(context.Background(), "tenant-hash|order-42", fp, charge); err != nil {
			panic(err)
		}
	}
	for _, s := range spans.Ended() {
		for _, kv := range s.Attributes() {
			if kv.Key == idemotel.AttrOutcome {
				fmt.Println(s.Name(), kv.Value.String())
			}
		}
	}
	// Output:
	// idem.claim new
	// idem.complete ok
	// idem.effect kept
	// idem.replay replay
}

// The outbox relay's lag as the gauge idem.outbox.lag, read at each collection.
func ExampleOutboxLag() {
	var relay *outbox.Relay // outbox.NewRelay(st, pub, outbox.RelayOptions{})
	if relay == nil {
		return // in a service: the running relay
	}
	reg, err := idemotel.OutboxLag(relay, "idem_outbox", idemotel.Options{})
	if err != nil {
		panic(err)
	}
	defer reg.Unregister()
}

package consumer_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/store/memstore"
)

// TestOptionsDefaults: Options reports the defaults New filled in: a 2 s InFlightDelay and a
// 64 KiB MaxResult; values that were set are kept.
func TestOptionsDefaults(t *testing.T) {
	t.Parallel()
	e, err := idem.New(memstore.New(), idem.Options{})
	if err != nil {
		t.Fatal(err)
	}
	h := func(context.Context, *consumer.Message) ([]byte, error) { return nil, nil }
	got := newConsumer(t, e, h, consumer.Options{}).Options()
	if got.InFlightDelay != 2*time.Second || got.MaxResult != 64<<10 {
		t.Errorf("defaults: InFlightDelay %s, MaxResult %d; want 2s and 65536", got.InFlightDelay, got.MaxResult)
	}
	got = newConsumer(t, e, h, consumer.Options{InFlightDelay: time.Second, MaxResult: 10}).Options()
	if got.InFlightDelay != time.Second || got.MaxResult != 10 {
		t.Errorf("set: InFlightDelay %s, MaxResult %d; want 1s and 10", got.InFlightDelay, got.MaxResult)
	}
}

package consumertest

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/internal/storehook"
	"github.com/idemkit/idem/store/memstore"
)

// BenchOptions tune Throughput.
type BenchOptions struct {
	// Consumers is how many consumers (Queue.Start) run at once. Default 2.
	Consumers int
	// Stores names further idem stores to benchmark, each with new events (sub-benchmark
	// "<name>") and with duplicates ("<name>-duplicates"), in the order of their names: for
	// example "pgstore", a function that returns a pgstore on a fresh table. Default none.
	Stores map[string]func(b *testing.B) idem.Store
}

// Throughput benchmarks consuming b.N messages (b.N distinct events, published before the
// timer starts) through the adapter, in sub-benchmarks run side by side:
//
//   - without-idem: the same consumer and adapter, but the effect runs directly (a Runner
//     that calls it), with no store: the baseline;
//   - memstore: through an idem engine on memstore (the engine's own cost);
//   - for each of BenchOptions.Stores, "<name>" through an idem engine on that store, and
//     "<name>-duplicates", every message a duplicate of an event already handled.
//
// The effect itself is a counter, so the figures are the adapter's and idem's overhead. Each
// reports msgs/s and store-rt/msg, the store round trips per message (Reserve, Complete,
// Release, Extend and Get calls).
func Throughput(b *testing.B, broker Broker, opt BenchOptions) {
	if opt.Consumers == 0 {
		opt.Consumers = 2
	}
	b.Run("without-idem", func(b *testing.B) { throughput(b, broker, opt, nil, false) })
	b.Run("memstore", func(b *testing.B) { throughput(b, broker, opt, memstore.New(), false) })
	for _, name := range slices.Sorted(maps.Keys(opt.Stores)) {
		newStore := opt.Stores[name]
		b.Run(name, func(b *testing.B) { throughput(b, broker, opt, newStore(b), false) })
		b.Run(name+"-duplicates", func(b *testing.B) { throughput(b, broker, opt, newStore(b), true) })
	}
}

// direct is a Runner without idem: it runs every effect.
type direct struct{}

func (direct) Run(ctx context.Context, _ idem.Call, fn idem.Func) (idem.Result, error) {
	resp, err := fn(ctx)
	return idem.Result{Response: resp}, err
}

func (direct) Options() idem.Options { return idem.Options{} }

func throughput(b *testing.B, broker Broker, opt BenchOptions, st idem.Store, dups bool) {
	ctx := context.Background()
	q := broker.NewQueue(b)
	var runner consumer.Runner = direct{}
	var roundTrips *atomic.Int64 // store calls
	if st != nil {
		roundTrips = new(atomic.Int64)
		counted := storehook.Wrap(st, storehook.Hooks{Before: func(context.Context, storehook.Op) error {
			roundTrips.Add(1)
			return nil
		}})
		e, err := idem.New(counted, idem.Options{Logger: quiet()})
		if err != nil {
			b.Fatal(err)
		}
		runner = e
	}
	var effects, acked atomic.Int64
	c, err := consumer.New(consumer.Options{Runner: runner, Logger: quiet(), Key: func(m *consumer.Message) (string, error) {
		var e event
		if err := json.Unmarshal(m.Body, &e); err != nil || e.ID == "" {
			return "", fmt.Errorf("no event id in %q", m.Body)
		}
		return e.ID, nil
	}, OnEvent: func(r consumer.Event) {
		if r.Outcome.Ack() {
			acked.Add(1)
		}
	}}, func(context.Context, *consumer.Message) ([]byte, error) {
		effects.Add(1)
		return nil, nil
	})
	if err != nil {
		b.Fatal(err)
	}
	prefix := randHex(4)
	publish := func() {
		for i := range b.N {
			body, _ := json.Marshal(event{ID: fmt.Sprintf("%s-%d", prefix, i)})
			if err := q.Publish(ctx, body); err != nil {
				b.Fatal(err)
			}
		}
	}
	consume := func(want int64) {
		ws := make([]Worker, opt.Consumers)
		for i := range ws {
			w, err := q.Start(ctx, c, nil)
			if err != nil {
				b.Fatal(err)
			}
			ws[i] = w
		}
		deadline := time.Now().Add(5 * time.Minute)
		for acked.Load() < want {
			if time.Now().After(deadline) {
				b.Fatalf("%d of %d messages acked after 5m", acked.Load(), want)
			}
			time.Sleep(time.Millisecond)
		}
		b.StopTimer()
		for _, w := range ws {
			w.Stop()
		}
	}
	if dups {
		publish()
		consume(int64(b.N))
		acked.Store(0)
		if roundTrips != nil {
			roundTrips.Store(0)
		}
	}
	publish()
	b.ResetTimer()
	b.StartTimer()
	consume(int64(b.N))
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
	if roundTrips != nil {
		b.ReportMetric(float64(roundTrips.Load())/float64(b.N), "store-rt/msg")
	}
	if want := int64(b.N); effects.Load() != want {
		b.Fatalf("%d effects for %d events", effects.Load(), want)
	}
}

package sqs_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/consumer/sqs"
	"github.com/idemkit/idem/store/memstore"
)

// BenchmarkWorker measures the Worker's throughput on fauxqs with and without idem, side by
// side in one run. b.N messages go through each variant, in alternating rounds of up to 500
// (plain, idem, plain, idem, ...) so that the shared machine's drifts hit both alike. A message
// is received, handled (the effect is one INSERT into PostgreSQL) and deleted. In "dups" every
// event is sent twice in a row, so half the messages are duplicates: plain runs their effect
// again, idem skips it. Reported: msgs/s of each variant and their ratio, idem/plain.
//
//	go test -run '^$' -bench BenchmarkWorker -benchtime 3000x ./consumer/sqs/
func BenchmarkWorker(b *testing.B) {
	for _, dups := range []bool{false, true} {
		name := map[bool]string{false: "unique", true: "dups"}[dups]
		b.Run(name, func(b *testing.B) {
			bb := setup(b)
			plainURL, _ := bb.queue(b, "plain", nil)
			idemURL, _ := bb.queue(b, "idem", nil)
			engine, err := idem.New(memstore.New(), idem.Options{
				// In-flight copies (two copies handled at the same moment) wait for the first
				// and are then skipped, rather than being hidden and redelivered.
				Wait: 2 * time.Second,
			})
			if err != nil {
				b.Fatal(err)
			}
			effect := func(ctx context.Context, key string, m *sqs.Message) error { return bb.effect(ctx, key, "bench") }
			plain := func(ctx context.Context, m *sqs.Message) error {
				key, err := orderKey(m)
				if err != nil {
					return err
				}
				return effect(ctx, key, m)
			}
			withIdem := idempotent(engine, "bench", effect)

			// One warm-up round each, untimed.
			drain(b, bb, plainURL, plain, 100, dups, "warm")
			drain(b, bb, idemURL, withIdem, 100, dups, "warm")
			b.ResetTimer()
			var tPlain, tIdem time.Duration
			for done, round := 0, 0; done < b.N; round++ {
				n := min(500, b.N-done)
				tPlain += drain(b, bb, plainURL, plain, n, dups, fmt.Sprint(round))
				tIdem += drain(b, bb, idemURL, withIdem, n, dups, fmt.Sprint(round))
				done += n
			}
			b.StopTimer()
			p, i := float64(b.N)/tPlain.Seconds(), float64(b.N)/tIdem.Seconds()
			b.ReportMetric(p, "plain-msgs/s")
			b.ReportMetric(i, "idem-msgs/s")
			b.ReportMetric(i/p, "idem/plain")
		})
	}
}

// drain sends n messages (untimed), then runs a worker until it has handled them all, and
// returns how long that took.
func drain(b *testing.B, bb *bundle, url string, h sqs.Handler, n int, dups bool, round string) time.Duration {
	bodies := make([]string, 0, n)
	for i := 0; len(bodies) < n; i++ {
		body := orderBody(fmt.Sprintf("%s-%d", round, i), i)
		bodies = append(bodies, body)
		if dups && len(bodies) < n {
			bodies = append(bodies, body)
		}
	}
	b.StopTimer()
	bb.send(b, url, bodies)
	b.StartTimer()
	w, err := sqs.NewWorker(bb.sqs, h, sqs.WorkerOptions{QueueURL: url, Concurrency: 32, WaitTime: time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- w.Run(ctx) }()
	for {
		s := w.Stats()
		if s.Failed > 0 {
			b.Fatalf("stats %+v", s)
		}
		if s.Deleted >= int64(n) {
			break
		}
		time.Sleep(500 * time.Microsecond)
	}
	took := time.Since(start)
	cancel()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	return took
}

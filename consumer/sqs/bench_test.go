package sqs_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/consumer/consumertest"
	"github.com/idemkit/idem/consumer/internal/pgbench"
	"github.com/idemkit/idem/consumer/sqs"
	"github.com/idemkit/idem/store/pgstore"
)

// BenchmarkThroughput measures the Worker on fauxqs with and without idem, side by side in one
// run (see consumertest.Throughput and docs/bench/sqs.md):
//
//	go test -run '^$' -bench BenchmarkThroughput -benchtime 2000x -count 3 ./consumer/sqs/
func BenchmarkThroughput(b *testing.B) {
	consumertest.Throughput(b, broker{}, consumertest.BenchOptions{Stores: pgbench.Stores(b)})
}

// BenchmarkAlternating measures the same thing with less exposure to a noisy machine: b.N
// messages go through each variant in alternating rounds of up to 500 (without idem, with idem
// on pgstore, without, with, ...), so that drifts in the machine's load hit both alike. The
// effect is one INSERT into PostgreSQL, as a real consumer's would be. Reported: msgs/s of
// each and their ratio.
//
//	go test -run '^$' -bench BenchmarkAlternating -benchtime 3000x ./consumer/sqs/
func BenchmarkAlternating(b *testing.B) {
	bb := setup(b)
	plainURL, _ := bb.queue(b, "plain", nil)
	idemURL, _ := bb.queue(b, "idem", nil)
	table := "sqsbench_" + randHex(5)
	st, err := pgstore.New(bb.pg, pgstore.Options{Table: table})
	if err != nil {
		b.Fatal(err)
	}
	if err := st.Migrate(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _, _ = bb.pg.Exec(context.Background(), "DROP TABLE IF EXISTS "+table) })
	effect := func(ctx context.Context, key string, m *consumer.Message) error { return bb.effect(ctx, key, "bench") }
	plain := newConsumer(b, direct{}, "bench", effect)
	withIdem := newConsumer(b, newEngine(b, st, idem.Options{}), "bench", effect)

	drainRound(b, bb, plainURL, plain, 50, "warm") // untimed warm-up
	drainRound(b, bb, idemURL, withIdem, 50, "warm")
	b.ResetTimer()
	var tPlain, tIdem time.Duration
	for done, round := 0, 0; done < b.N; round++ {
		n := min(500, b.N-done)
		tPlain += drainRound(b, bb, plainURL, plain, n, fmt.Sprint(round))
		tIdem += drainRound(b, bb, idemURL, withIdem, n, fmt.Sprint(round))
		done += n
	}
	b.StopTimer()
	p, i := float64(b.N)/tPlain.Seconds(), float64(b.N)/tIdem.Seconds()
	b.ReportMetric(p, "without-msgs/s")
	b.ReportMetric(i, "pgstore-msgs/s")
	b.ReportMetric(i/p, "ratio")
}

// direct runs every effect, without idem: the baseline.
type direct struct{}

func (direct) Run(ctx context.Context, _ idem.Call, fn idem.Func) (idem.Result, error) {
	resp, err := fn(ctx)
	return idem.Result{Response: resp}, err
}

func (direct) Options() idem.Options { return idem.Options{} }

// drainRound sends n distinct orders (untimed), then runs two workers until all are deleted,
// and returns how long that took.
func drainRound(b *testing.B, bb *bundle, url string, c *consumer.Consumer, n int, round string) time.Duration {
	b.StopTimer()
	bodies := make([]string, n)
	for i := range bodies {
		bodies[i] = orderBody(fmt.Sprintf("%s-%s-%d", url[len(url)-5:], round, i), i)
	}
	bb.send(b, url, bodies)
	b.StartTimer()
	ctx, cancel := context.WithCancel(context.Background())
	var ws []*sqs.Worker
	var wg sync.WaitGroup
	start := time.Now()
	for range 2 {
		w, err := sqs.NewWorker(bb.sqs, c, sqs.WorkerOptions{QueueURL: url, Concurrency: 4, WaitTime: time.Second, Logger: quiet()})
		if err != nil {
			b.Fatal(err)
		}
		ws = append(ws, w)
		wg.Go(func() { _ = w.Run(ctx) })
	}
	for ws[0].Stats().Deleted+ws[1].Stats().Deleted < int64(n) {
		time.Sleep(500 * time.Microsecond)
	}
	took := time.Since(start)
	cancel()
	wg.Wait()
	return took
}

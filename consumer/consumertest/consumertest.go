package consumertest

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/store/memstore"
)

// Broker makes queues for the suite.
type Broker interface {
	// NewQueue returns a fresh, empty queue that shares nothing with other tests, and
	// registers its removal with t.Cleanup. It fails or skips t when the broker is missing.
	NewQueue(t testing.TB) Queue
}

// Queue is one isolated queue (a JetStream stream and durable consumer, a RabbitMQ queue).
type Queue interface {
	// Publish publishes body as a new message with a fresh transport id. It returns once the
	// broker has accepted it.
	Publish(ctx context.Context, body []byte) error
	// Start starts one consumer that hands every delivery to c.Handle and acks, redelivers or
	// dead-letters it as the Result says. Before acking a delivery it calls crash (when not
	// nil); if crash returns true the consumer does not ack, drops its connection abruptly,
	// stops, and closes the Worker's Done channel.
	Start(ctx context.Context, c *consumer.Consumer, crash func() bool) (Worker, error)
	// Pending returns how many messages the broker still holds for the queue, ready or
	// delivered and not acked. The suite calls it after stopping every consumer. A message that
	// was dead-lettered (OutcomeRejected) does not count.
	Pending(ctx context.Context) (int, error)
}

// Worker is a running consumer.
type Worker interface {
	// Stop stops the consumer gracefully: it takes no new delivery, finishes (and acks) the
	// ones under way, and returns when it has stopped. It is safe to call after a crash.
	Stop()
	// Done is closed when the consumer has stopped, by Stop or after a crash.
	Done() <-chan struct{}
}

// Killer is a Worker that can be killed on demand, for the CrashDuringEffect test (which is
// skipped, visibly, for workers that are not Killers).
type Killer interface {
	Worker
	// Kill makes the consumer behave like a process killed at that instant: it acks nothing
	// more, drops its connection abruptly so that the broker redelivers every message it held,
	// and stops, closing Done. It may be called from inside a handler (the effect under way
	// goes on, but its message is not acked), so it must not wait for the handlers to finish.
	Kill()
}

// Options tune the suite for an adapter.
type Options struct {
	// Consumers is how many consumers run at once on one queue. Default 4.
	Consumers int
	// Events is how many business events the Duplicates test publishes. Default 200.
	Events int
	// Copies is how many times each event is published, each time with a new transport id.
	// Default 3.
	Copies int
	// CrashMessages is how many messages the crash test publishes (at least 1,000 by default:
	// 500 events, twice each). Default 1000.
	CrashMessages int
	// CrashRate is the chance that a consumer crashes between an effect and its ack. Default
	// 0.03.
	CrashRate float64
	// FailEvents is how many events the AckAfterEffect test publishes, once each. Default 50.
	FailEvents int
	// Store returns the idem store a subtest's consumers share. Default: a new memstore.
	Store func(t *testing.T) idem.Store
	// Runner, when set, returns what a subtest's consumers run their effects through, in
	// place of an engine over Store: a transactional runner such as pgstore.NewTxRunner, whose
	// Effects then write through the transaction the handler's context carries. Default nil:
	// an *idem.Engine over Store.
	Runner func(t *testing.T) consumer.Runner
	// Effects returns where a subtest's effects are recorded and counted. Default: a counter
	// in memory, enough because the suite runs every consumer in the test's process. Supply
	// one backed by a database to see effects the way a real service would.
	Effects func(t *testing.T) Effects
	// Timeout bounds each subtest's wait for every effect and an empty queue. Default 2m.
	Timeout time.Duration
	// Redelivery is how long the broker takes to redeliver a message whose consumer died
	// without acking it: JetStream's AckWait, SQS's visibility timeout; 0 for RabbitMQ, which
	// requeues as soon as the connection closes. The suite waits that long for stragglers
	// before it concludes that the queue is drained. Default 0.
	Redelivery time.Duration
	// SkipRejected skips the Rejected test, for a broker that cannot dead-letter a message at
	// once (SQS leaves it to the queue's redrive policy). The suite logs the skip.
	SkipRejected bool
}

// Run runs the suite against broker.
func Run(t *testing.T, broker Broker, opt Options) {
	s := &suite{broker: broker, opt: withDefaults(opt)}
	t.Run("Duplicates", s.duplicates)
	t.Run("CrashBetweenEffectAndAck", s.crashes)
	t.Run("AckAfterEffect", s.ackAfterEffect)
	t.Run("CrashDuringEffect", s.crashDuringEffect)
	t.Run("Rejected", s.rejected)
	t.Run("ScopesApart", s.scopesApart)
}

func withDefaults(opt Options) Options {
	opt.Consumers = cmp.Or(opt.Consumers, 4)
	opt.Events = cmp.Or(opt.Events, 200)
	opt.Copies = cmp.Or(opt.Copies, 3)
	opt.CrashMessages = cmp.Or(opt.CrashMessages, 1000)
	opt.CrashRate = cmp.Or(opt.CrashRate, 0.03)
	opt.FailEvents = cmp.Or(opt.FailEvents, 50)
	opt.Timeout = cmp.Or(opt.Timeout, 2*time.Minute)
	if opt.Store == nil {
		opt.Store = func(*testing.T) idem.Store { return memstore.New() }
	}
	if opt.Effects == nil {
		opt.Effects = func(*testing.T) Effects { return newMemEffects() }
	}
	return opt
}

type suite struct {
	broker Broker
	opt    Options
}

// event is the body the suite publishes; ID is the business key. Copies of one event are
// byte-identical, as a producer's retry is; only their transport ids differ.
type event struct {
	ID    string `json:"id"`
	Cents int    `json:"cents"`
	Slow  bool   `json:"slow,omitempty"`
}

// bundle is what one subtest uses.
type bundle struct {
	t       *testing.T
	q       Queue
	effs    Effects
	runner  consumer.Runner
	outcome [len(outcomes) + 1]atomic.Int64 // counts per consumer.Outcome (outcomeIndex)
	failed  sync.Map                        // event ids that already failed once (transient failures)
	// beforeEffect, when set, is called before each effect; an error fails it.
	beforeEffect func(e event) error
}

func (s *suite) setup(t *testing.T) *bundle {
	t.Helper()
	q := s.broker.NewQueue(t)
	if s.opt.Runner != nil {
		return &bundle{t: t, q: q, effs: s.opt.Effects(t), runner: s.opt.Runner(t)}
	}
	engine, err := idem.New(s.opt.Store(t), idem.Options{Lease: 5 * time.Second, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	return &bundle{t: t, q: q, effs: s.opt.Effects(t), runner: engine}
}

// consumer returns the Consumer under test: it charges an event by recording one effect for
// the event id. Slow events take a while, so that copies meet in flight; with failRate, the
// first attempt of that share of events fails transiently.
func (b *bundle) consumer(failRate float64) *consumer.Consumer {
	c, err := consumer.New(consumer.Options{
		Runner:        b.runner,
		Scope:         "consumertest",
		InFlightDelay: 200 * time.Millisecond,
		RetryDelay:    50 * time.Millisecond,
		Logger:        quiet(),
		OnEvent: func(r consumer.Event) {
			b.outcome[outcomeIndex(r.Outcome)].Add(1)
		},
		Key: func(m *consumer.Message) (string, error) {
			var e event
			if err := json.Unmarshal(m.Body, &e); err != nil || e.ID == "" {
				return "", fmt.Errorf("no event id in %q", m.Body)
			}
			return "event/" + e.ID, nil
		},
	}, func(ctx context.Context, m *consumer.Message) ([]byte, error) {
		var e event
		if err := json.Unmarshal(m.Body, &e); err != nil {
			return nil, consumer.Reject(err)
		}
		if e.Slow {
			time.Sleep(time.Duration(50+mrand.IntN(150)) * time.Millisecond)
		}
		if b.beforeEffect != nil {
			if err := b.beforeEffect(e); err != nil {
				return nil, err
			}
		}
		if failRate > 0 && mrand.Float64() < failRate {
			if _, loaded := b.failed.LoadOrStore(e.ID, true); !loaded {
				return nil, errors.New("consumertest: transient failure")
			}
		}
		if err := b.effs.Add(ctx, e.ID); err != nil {
			return nil, err
		}
		return []byte("charged " + e.ID), nil
	})
	if err != nil {
		b.t.Fatal(err)
	}
	return c
}

// events returns n events with ids unique to this run; every tenth is slow.
func events(n int) []event {
	prefix := randHex(4)
	es := make([]event, n)
	for i := range es {
		es[i] = event{ID: fmt.Sprintf("%s-%d", prefix, i), Cents: 100 + i, Slow: i%10 == 0}
	}
	return es
}

// publish publishes every event copies times, in random order, from a few goroutines.
func (b *bundle) publish(ctx context.Context, es []event, copies int) {
	b.t.Helper()
	var bodies [][]byte
	for _, e := range es {
		body, _ := json.Marshal(e)
		for range copies {
			bodies = append(bodies, body)
		}
	}
	b.publishBodies(ctx, bodies)
}

func (b *bundle) publishBodies(ctx context.Context, bodies [][]byte) {
	b.t.Helper()
	mrand.Shuffle(len(bodies), func(i, j int) { bodies[i], bodies[j] = bodies[j], bodies[i] })
	var wg sync.WaitGroup
	var next atomic.Int64
	errs := make(chan error, 4)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= len(bodies) {
					return
				}
				if err := b.q.Publish(ctx, bodies[i]); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.t.Fatalf("consumertest: publish: %v", err)
	}
}

// pool keeps n consumers running, replacing each one that crashes, until stop is called.
type pool struct {
	stopOnce sync.Once
	stopCh   chan struct{}
	done     chan struct{}
	crashes  atomic.Int64
	acks     atomic.Int64
}

func (b *bundle) run(ctx context.Context, c *consumer.Consumer, n int, crashRate float64) *pool {
	p := &pool{stopCh: make(chan struct{}), done: make(chan struct{})}
	crash := func() bool {
		if crashRate > 0 && mrand.Float64() < crashRate {
			p.crashes.Add(1)
			return true
		}
		p.acks.Add(1)
		return false
	}
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				w, err := b.q.Start(ctx, c, crash)
				if err != nil {
					b.t.Errorf("consumertest: start consumer: %v", err)
					return
				}
				select {
				case <-w.Done(): // crashed: start another
				case <-p.stopCh:
					w.Stop()
					return
				}
			}
		}()
	}
	go func() { wg.Wait(); close(p.done) }()
	b.t.Cleanup(p.stop) // when the test fails before it stops them, the consumers stop first
	return p
}

func (p *pool) stop() {
	p.stopOnce.Do(func() { close(p.stopCh) })
	<-p.done
}

// waitFor polls cond until it holds or the suite's timeout runs out.
func (b *bundle) waitFor(timeout time.Duration, what string, cond func() (bool, string)) {
	b.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("consumertest: timed out after %s waiting for %s: %s", timeout, what, state)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// effects returns the number of effects and of distinct events with one.
func (b *bundle) effects(ctx context.Context) (n, distinct int) {
	b.t.Helper()
	counts, err := b.effs.Counts(ctx)
	if err != nil {
		b.t.Fatalf("consumertest: count effects: %v", err)
	}
	for _, c := range counts {
		n += c
	}
	return n, len(counts)
}

// check asserts exactly one effect per event.
func (b *bundle) check(ctx context.Context, es []event) {
	b.t.Helper()
	n, distinct := b.effects(ctx)
	if n != len(es) || distinct != len(es) {
		b.t.Errorf("consumertest: %d effects for %d distinct events, want exactly one for each of %d (double effects: %v)",
			n, distinct, len(es), b.doubles(ctx))
	}
}

// doubles names up to ten events with more than one effect.
func (b *bundle) doubles(ctx context.Context) []string {
	counts, err := b.effs.Counts(ctx)
	if err != nil {
		b.t.Fatalf("consumertest: find double effects: %v", err)
	}
	var keys []string
	for k, n := range counts {
		if n > 1 {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	var doubles []string
	for _, k := range keys[:min(10, len(keys))] {
		doubles = append(doubles, fmt.Sprintf("%s×%d", k, counts[k]))
	}
	return doubles
}

// drain stops p, then makes sure the broker holds no message: messages that a crashed
// consumer never acked come back after Options.Redelivery, so while any is left, consumers
// (without crashes) run again for a while. It fails the test if the queue does not empty.
func (s *suite) drain(ctx context.Context, b *bundle, c *consumer.Consumer, p *pool) {
	b.t.Helper()
	p.stop()
	deadline := time.Now().Add(s.opt.Timeout)
	for {
		n, err := b.q.Pending(ctx)
		if err != nil {
			b.t.Fatalf("consumertest: pending: %v", err)
		}
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("consumertest: %d messages left in the queue after %s of draining", n, s.opt.Timeout)
		}
		p = b.run(ctx, c, s.opt.Consumers, 0)
		time.Sleep(max(s.opt.Redelivery*3/2, 500*time.Millisecond))
		p.stop()
	}
}

func (b *bundle) logOutcomes(p *pool) {
	b.t.Helper()
	var parts []any
	for _, o := range outcomes {
		parts = append(parts, o.String(), b.outcome[outcomeIndex(o)].Load())
	}
	parts = append(parts, "acks", p.acks.Load(), "crashes", p.crashes.Load())
	// (acks counts the acks attempted; an ack sent on a connection that another delivery's
	// crash just closed fails, and its message comes back as a replay.)
	b.t.Log(append([]any{"outcomes:"}, parts...)...)
}

func (s *suite) duplicates(t *testing.T) {
	t.Parallel()
	b := s.setup(t)
	ctx := context.Background()
	es := events(s.opt.Events)
	total := len(es) * s.opt.Copies
	c := b.consumer(0.05)
	p := b.run(ctx, c, s.opt.Consumers, 0)
	b.publish(ctx, es, s.opt.Copies)
	b.waitFor(s.opt.Timeout, "every effect and every ack", func() (bool, string) {
		_, distinct := b.effects(ctx)
		acks := p.acks.Load()
		return distinct == len(es) && acks >= int64(total), fmt.Sprintf("%d/%d events done, %d/%d messages acked", distinct, len(es), acks, total)
	})
	s.drain(ctx, b, c, p)
	b.logOutcomes(p)
	b.check(ctx, es)
	if n := b.outcome[outcomeIndex(consumer.OutcomeExecuted)].Load(); n != int64(len(es)) {
		t.Errorf("consumertest: %d OutcomeExecuted outcomes, want one per event (%d)", n, len(es))
	}
	if b.outcome[outcomeIndex(consumer.OutcomeReplay)].Load() == 0 {
		t.Error("consumertest: no OutcomeReplay outcome although every event was published several times")
	}
}

func (s *suite) crashes(t *testing.T) {
	t.Parallel()
	r := s.crashReport(t)
	if r.Effects != r.Events || r.Distinct != r.Events {
		t.Errorf("consumertest: %d effects for %d distinct events, want exactly one for each of %d (double effects: %v)",
			r.Effects, r.Distinct, r.Events, r.Doubles)
	}
	if r.Crashes == 0 {
		t.Errorf("consumertest: no consumer crashed in %d messages at rate %g; the test did not test crashes", r.Messages, s.opt.CrashRate)
	}
	if r.Outcomes[consumer.OutcomeReplay] < r.Crashes {
		t.Errorf("consumertest: %d crashes after the effect but only %d duplicates: redeliveries went missing",
			r.Crashes, r.Outcomes[consumer.OutcomeReplay])
	}
}

// Report is what CrashReport found.
type Report struct {
	// Events is how many business events were published; Messages how many messages (two
	// per event, with different transport ids).
	Events, Messages int
	// Effects is how many effects the consumers ran; Distinct for how many events.
	// Exactly once means Effects == Distinct == Events.
	Effects, Distinct int
	// Doubles names up to ten events whose effect ran more than once, with the count.
	Doubles []string
	// Crashes is how many times a consumer crashed between an effect and its ack.
	Crashes int64
	// Outcomes counts the Results of Consumer.Handle by Outcome.
	Outcomes map[consumer.Outcome]int64
}

// CrashReport runs the crash scenario of the suite (Options.CrashMessages messages,
// consumers crashing at Options.CrashRate between effect and ack and being replaced) and
// returns what it found, without judging it; it fails t only when the scenario cannot run or
// the queue does not drain. The suite's CrashBetweenEffectAndAck test asserts exactly once on
// it; an adapter's own test can show that the suite bites, with a store that does not
// deduplicate (Options.Store).
func CrashReport(t *testing.T, broker Broker, opt Options) Report {
	return (&suite{broker: broker, opt: withDefaults(opt)}).crashReport(t)
}

func (s *suite) crashReport(t *testing.T) Report {
	b := s.setup(t)
	ctx := context.Background()
	es := events((s.opt.CrashMessages + 1) / 2)
	total := len(es) * 2
	c := b.consumer(0)
	p := b.run(ctx, c, s.opt.Consumers, s.opt.CrashRate)
	b.publish(ctx, es, 2)
	b.waitFor(s.opt.Timeout, "every effect and every ack", func() (bool, string) {
		_, distinct := b.effects(ctx)
		acks := p.acks.Load()
		return distinct == len(es) && acks >= int64(total), fmt.Sprintf("%d/%d events done, %d/%d messages acked, %d crashes",
			distinct, len(es), acks, total, p.crashes.Load())
	})
	s.drain(ctx, b, c, p)
	b.logOutcomes(p)
	r := Report{Events: len(es), Messages: total, Crashes: p.crashes.Load(), Outcomes: map[consumer.Outcome]int64{}}
	r.Effects, r.Distinct = b.effects(ctx)
	r.Doubles = b.doubles(ctx)
	for _, o := range outcomes {
		r.Outcomes[o] = b.outcome[outcomeIndex(o)].Load()
	}
	return r
}

// ackAfterEffect publishes every event once and fails the first attempt of every effect: each
// message must come back and succeed. An adapter that acks a delivery before its effect has
// succeeded (before Handle returns, or whatever its outcome) loses it: the broker deletes a
// message whose effect then fails, and nothing runs it again. The queue then empties while
// effects are missing, which no other copy of the event can hide.
func (s *suite) ackAfterEffect(t *testing.T) {
	t.Parallel()
	b := s.setup(t)
	ctx := context.Background()
	es := events(s.opt.FailEvents)
	for i := range es {
		es[i].Slow = false
	}
	c := b.consumer(1) // the first attempt of every event fails
	p := b.run(ctx, c, s.opt.Consumers, 0)
	b.publish(ctx, es, 1)
	// Wait until every effect has run, or until nothing has progressed for a while after every
	// first attempt failed: the messages that never came back are then lost, and draining the
	// queue (below) shows it.
	stall := max(2*s.opt.Redelivery, 5*time.Second)
	deadline := time.Now().Add(s.opt.Timeout)
	last, since := -1, time.Now()
	for {
		_, distinct := b.effects(ctx)
		if distinct == len(es) && p.acks.Load() >= int64(len(es)) {
			break
		}
		if distinct != last {
			last, since = distinct, time.Now()
		}
		failed := b.outcome[outcomeIndex(consumer.OutcomeFailed)].Load()
		if failed >= int64(len(es)) && time.Since(since) > stall {
			t.Logf("consumertest: no effect for %s after every first attempt failed (%d/%d events done)", stall, distinct, len(es))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("consumertest: timed out after %s: %d/%d events done, %d first attempts failed", s.opt.Timeout, distinct, len(es), failed)
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.drain(ctx, b, c, p)
	b.logOutcomes(p)
	if _, distinct := b.effects(ctx); distinct < len(es) {
		t.Fatalf("consumertest: %d of %d events never had their effect although the broker holds no message: "+
			"their deliveries were acked before the effect succeeded", len(es)-distinct, len(es))
	}
	b.check(ctx, es)
	if n := b.outcome[outcomeIndex(consumer.OutcomeFailed)].Load(); n != int64(len(es)) {
		t.Errorf("consumertest: %d OutcomeFailed outcomes, want one per event (%d)", n, len(es))
	}
	if n := b.outcome[outcomeIndex(consumer.OutcomeExecuted)].Load(); n != int64(len(es)) {
		t.Errorf("consumertest: %d OutcomeExecuted outcomes, want one per event (%d)", n, len(es))
	}
}

// crashDuringEffect runs one consumer at a time on events published once each; on the first
// attempt of every tenth event the consumer is killed while the effect runs, before the effect
// is done (the effect then fails, as a killed process's would never finish). Each such message
// must come back to the next consumer and succeed. An adapter that acks or commits a delivery
// before its effect has finished loses it.
func (s *suite) crashDuringEffect(t *testing.T) {
	t.Parallel()
	b := s.setup(t)
	ctx := context.Background()
	es := events(s.opt.FailEvents)
	for i := range es {
		es[i].Slow = false
	}
	die := map[string]bool{}
	for i := 0; i < len(es); i += 10 {
		die[es[i].ID] = true
	}
	var cur atomic.Pointer[Killer]
	var kills atomic.Int64
	b.beforeEffect = func(e event) error {
		if !die[e.ID] {
			return nil
		}
		k := cur.Load()
		if k == nil { // the first consumer is not known yet: fail, and die next time
			return errors.New("consumertest: transient failure")
		}
		if _, again := b.failed.LoadOrStore(e.ID, true); again {
			return nil
		}
		(*k).Kill()
		kills.Add(1)
		return errors.New("consumertest: the process died during the effect")
	}
	c := b.consumer(0)
	b.publish(ctx, es, 1)
	stall := max(2*s.opt.Redelivery, 5*time.Second)
	deadline := time.Now().Add(s.opt.Timeout)
	for {
		w, err := b.q.Start(ctx, c, nil)
		if err != nil {
			t.Fatalf("consumertest: start consumer: %v", err)
		}
		k, ok := w.(Killer)
		if !ok {
			w.Stop()
			t.Skip("consumertest: the adapter's Worker is not a Killer")
		}
		cur.Store(&k)
		// Until the consumer dies, every event is done, or nothing progresses for a while
		// (then the consumer is stopped and the queue looked at).
		last, since := -1, time.Now()
		for done := false; !done; {
			select {
			case <-w.Done():
				done = true
				continue
			case <-time.After(50 * time.Millisecond):
			}
			_, distinct := b.effects(ctx)
			if distinct != last {
				last, since = distinct, time.Now()
			}
			if distinct == len(es) || time.Since(since) > stall {
				w.Stop()
				done = true
			} else if time.Now().After(deadline) {
				w.Stop()
				t.Fatalf("consumertest: timed out after %s: %d/%d events done, %d kills", s.opt.Timeout, distinct, len(es), kills.Load())
			}
		}
		if _, distinct := b.effects(ctx); distinct == len(es) {
			break
		}
		if time.Now().After(deadline) {
			_, distinct := b.effects(ctx)
			t.Fatalf("consumertest: %d of %d events never had their effect after %s, with %d consumers killed during an effect: "+
				"their deliveries were acked before the effect finished", len(es)-distinct, len(es), s.opt.Timeout, kills.Load())
		}
		if n, err := b.q.Pending(ctx); err == nil && n == 0 {
			_, distinct := b.effects(ctx)
			t.Fatalf("consumertest: %d of %d events never had their effect although the broker holds no message, "+
				"with %d consumers killed during an effect: their deliveries were acked before the effect finished",
				len(es)-distinct, len(es), kills.Load())
		}
	}
	p := b.run(ctx, c, 1, 0)
	s.drain(ctx, b, c, p)
	b.check(ctx, es)
	if n := kills.Load(); n != int64(len(die)) {
		t.Errorf("consumertest: %d consumers killed, want %d", n, len(die))
	}
}

func (s *suite) rejected(t *testing.T) {
	if s.opt.SkipRejected {
		t.Skip("consumertest: Options.SkipRejected: the adapter cannot dead-letter at once")
	}
	t.Parallel()
	b := s.setup(t)
	ctx := context.Background()
	es := events(20)
	for i := range es {
		es[i].Slow = false
	}
	c := b.consumer(0)
	p := b.run(ctx, c, 2, 0)
	var bodies [][]byte
	for _, e := range es {
		body, _ := json.Marshal(e)
		bodies = append(bodies, body)
	}
	bodies = append(bodies, []byte("not json"), []byte(`{"cents":5}`))
	b.publishBodies(ctx, bodies)
	b.waitFor(s.opt.Timeout, "the good events acked and the bad ones rejected", func() (bool, string) {
		acks, rej := p.acks.Load(), b.outcome[outcomeIndex(consumer.OutcomeRejected)].Load()
		return acks >= int64(len(es)) && rej >= 2, fmt.Sprintf("%d/%d acked, %d/2 rejected", acks, len(es), rej)
	})
	time.Sleep(max(s.opt.Redelivery*3/2, 500*time.Millisecond)) // a rejected message that came back would show now
	s.drain(ctx, b, c, p)
	b.check(ctx, es)
	if n := b.outcome[outcomeIndex(consumer.OutcomeRejected)].Load(); n != 2 {
		t.Errorf("consumertest: %d OutcomeRejected outcomes, want 2 (a rejected message must not come back)", n)
	}
}

// scopesApart runs four consumers, each on its own queue as services fed by one topic are,
// all sharing one store, and publishes the same events to every queue. Their (scope, key) pairs
// differ, but a join of scope and key that a scope or a key can imitate merges them: scope
// "billing" with key "eu/1" and scope "billing/eu" with key "1" under a "/" join; the same key
// in the scopes "billing" and "shipping"; and an unscoped key "billing|eu/1" that spells a
// scoped one. Each consumer must run its own effect once per event: a merged record would make
// one consumer's message a replay of another's, and its effect would never run.
func (s *suite) scopesApart(t *testing.T) {
	t.Parallel()
	b := s.setup(t)
	ctx := context.Background()
	es := events(10)
	for i := range es {
		es[i].Slow = false
	}
	run := randHex(4)
	sides := []struct {
		label, scope string
		key          func(id string) string
	}{
		{"billing", "billing-" + run, func(id string) string { return "eu/" + id }},
		{"billing/eu", "billing-" + run + "/eu", func(id string) string { return id }},
		{"shipping", "shipping-" + run, func(id string) string { return "eu/" + id }},
		{"unscoped", "", func(id string) string { return "billing-" + run + "|eu/" + id }},
	}
	const copies = 2
	bs := make([]*bundle, len(sides))
	cs := make([]*consumer.Consumer, len(sides))
	ps := make([]*pool, len(sides))
	for i, sd := range sides {
		bs[i] = b
		if i > 0 {
			bs[i] = &bundle{t: t, q: s.broker.NewQueue(t), effs: b.effs, runner: b.runner}
		}
		cs[i] = bs[i].scopedConsumer(sd.label, sd.scope, sd.key)
		ps[i] = bs[i].run(ctx, cs[i], min(2, s.opt.Consumers), 0)
	}
	for _, sb := range bs {
		sb.publish(ctx, es, copies)
	}
	want := int64(len(es) * copies)
	b.waitFor(s.opt.Timeout, "every message of every consumer handled", func() (bool, string) {
		var state []string
		done := true
		for i, sb := range bs {
			n := sb.outcome[outcomeIndex(consumer.OutcomeExecuted)].Load() + sb.outcome[outcomeIndex(consumer.OutcomeReplay)].Load() + sb.outcome[outcomeIndex(consumer.OutcomeRejected)].Load()
			done = done && n >= want
			state = append(state, fmt.Sprintf("%s %d/%d", sides[i].label, n, want))
		}
		return done, fmt.Sprint(state)
	})
	for i, sb := range bs {
		s.drain(ctx, sb, cs[i], ps[i])
	}
	counts, err := b.effs.Counts(ctx)
	if err != nil {
		t.Fatalf("consumertest: count effects: %v", err)
	}
	for i, sd := range sides {
		var missing, doubled []string
		for _, e := range es {
			switch n := counts[sd.label+"#"+e.ID]; {
			case n == 0:
				missing = append(missing, sd.key(e.ID))
			case n > 1:
				doubled = append(doubled, fmt.Sprintf("%s×%d", sd.key(e.ID), n))
			}
		}
		if len(missing) > 0 || len(doubled) > 0 {
			t.Errorf("consumertest: consumer with scope %q: %d of %d events never had its effect (keys %v), %d had it more than once (%v); outcomes %v",
				sd.scope, len(missing), len(es), missing, len(doubled), doubled, bs[i].outcomeCounts())
		}
		if n := bs[i].outcome[outcomeIndex(consumer.OutcomeExecuted)].Load(); n != int64(len(es)) {
			t.Errorf("consumertest: consumer with scope %q: %d OutcomeExecuted outcomes, want one per event (%d)", sd.scope, n, len(es))
		}
		if n := bs[i].outcome[outcomeIndex(consumer.OutcomeRejected)].Load(); n != 0 {
			t.Errorf("consumertest: consumer with scope %q: %d OutcomeRejected outcomes, want none", sd.scope, n)
		}
	}
}

// scopedConsumer returns a consumer with the given scope, whose key is key(event id) and whose
// effect is recorded as label#id.
func (b *bundle) scopedConsumer(label, scope string, key func(id string) string) *consumer.Consumer {
	c, err := consumer.New(consumer.Options{
		Runner:        b.runner,
		Scope:         scope,
		InFlightDelay: 200 * time.Millisecond,
		RetryDelay:    50 * time.Millisecond,
		Logger:        quiet(),
		OnEvent: func(r consumer.Event) {
			b.outcome[outcomeIndex(r.Outcome)].Add(1)
		},
		Key: func(m *consumer.Message) (string, error) {
			var e event
			if err := json.Unmarshal(m.Body, &e); err != nil || e.ID == "" {
				return "", fmt.Errorf("no event id in %q", m.Body)
			}
			return key(e.ID), nil
		},
	}, func(ctx context.Context, m *consumer.Message) ([]byte, error) {
		var e event
		if err := json.Unmarshal(m.Body, &e); err != nil {
			return nil, consumer.Reject(err)
		}
		if err := b.effs.Add(ctx, label+"#"+e.ID); err != nil {
			return nil, err
		}
		return []byte(label + " charged " + e.ID), nil
	})
	if err != nil {
		b.t.Fatal(err)
	}
	return c
}

// outcomeCounts returns the bundle's outcome counts, for failure messages.
func (b *bundle) outcomeCounts() map[string]int64 {
	m := map[string]int64{}
	for _, o := range outcomes {
		m[o.String()] = b.outcome[outcomeIndex(o)].Load()
	}
	return m
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// outcomes are the consumer's outcomes, in the order the suite logs them.
var outcomes = [...]consumer.Outcome{consumer.OutcomeExecuted, consumer.OutcomeReplay, consumer.OutcomeInFlight,
	consumer.OutcomeFailed, consumer.OutcomeRejected}

// outcomeIndex is o's place in a bundle's counts: its index in outcomes, or len(outcomes) for
// an outcome the suite does not know.
func outcomeIndex(o consumer.Outcome) int {
	for i, k := range outcomes {
		if k == o {
			return i
		}
	}
	return len(outcomes)
}

package kafka

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/consumer"
)

// KeyHeader is the Header entry under which Message puts the record's key, when it has one.
// Producers often set the record key to the business id (an order id, to keep an order's
// events in one partition): a consumer.KeyFunc may read it. It is not a transport id: every
// copy of an event that a producer publishes carries the same key.
const KeyHeader = "kafka-key"

// Options configure a Worker. The zero value is a good default for every field.
type Options struct {
	// MaxPollRecords is how many records one poll returns at most, over all the partitions
	// of the worker. Default 100.
	MaxPollRecords int
	// DeadLetter, when set, is called with every OutcomeRejected record before the worker commits
	// past it: produce it to a dead-letter topic, for example. If it returns an error the
	// record is not committed past; it is fetched and handled again after
	// consumer.Options.RetryDelay. Default nil: a rejected record is logged and committed past
	// (Kafka has no dead-letter queue of its own).
	DeadLetter func(ctx context.Context, rec *kgo.Record, r consumer.Result) error
	// Logger receives commit, fetch and dead-letter errors. Default slog.Default().
	Logger *slog.Logger

	// beforeCommit, set by tests, is called before a settled record is marked for commit;
	// true stops the worker at once, marking and committing nothing more, as if the process
	// died at that instant.
	beforeCommit func(consumer.Result) bool
}

// Worker consumes a Kafka consumer group with franz-go: it hands every record to a
// consumer.Consumer and commits a partition's offset only past records whose outcome is
// settled (OutcomeExecuted, OutcomeReplay, or OutcomeRejected and dead-lettered). See the package
// documentation.
type Worker struct {
	cl  *kgo.Client
	c   *consumer.Consumer
	opt Options

	hurry atomic.Bool // a rebalance waits, or the worker stops: finish the records under way only
	dead  atomic.Bool // (tests) the process "died": commit nothing more
	wake  chan struct{}
}

// NewWorker returns a Worker that runs c on the records of a franz-go client made with
// clientOpts, which must name the consumer group (kgo.ConsumerGroup) and its topics
// (kgo.ConsumeTopics) and the brokers (kgo.SeedBrokers). The worker adds the options its
// commits depend on, which override the caller's: kgo.BlockRebalanceOnPoll,
// kgo.AutoCommitMarks, kgo.OnPartitionsRevoked and kgo.OnPartitionsCallbackBlocked. It fails
// with an error matching idem.ErrInvalidInput, naming the field, when an argument or option is
// invalid, and with the client's error when the client cannot be made.
func NewWorker(c *consumer.Consumer, opt Options, clientOpts ...kgo.Opt) (*Worker, error) {
	switch {
	case c == nil:
		return nil, &idem.OptionError{Package: "kafka", Field: "consumer", Problem: "is nil"}
	case opt.MaxPollRecords < 0:
		return nil, &idem.OptionError{Package: "kafka", Field: "Options.MaxPollRecords", Problem: fmt.Sprintf("%d is negative", opt.MaxPollRecords)}
	}
	opt.MaxPollRecords = cmp.Or(opt.MaxPollRecords, 100)
	opt.Logger = cmp.Or(opt.Logger, slog.Default())
	w := &Worker{c: c, opt: opt, wake: make(chan struct{}, 1)}
	all := append(clientOpts[:len(clientOpts):len(clientOpts)],
		kgo.BlockRebalanceOnPoll(),
		kgo.AutoCommitMarks(),
		kgo.OnPartitionsRevoked(w.revoked),
		kgo.OnPartitionsCallbackBlocked(w.blocked),
	)
	cl, err := kgo.NewClient(all...)
	if err != nil {
		return nil, fmt.Errorf("kafka: client: %w", err)
	}
	if g, _ := cl.OptValue(kgo.ConsumerGroup).(string); g == "" {
		cl.Close()
		return nil, &idem.OptionError{Package: "kafka", Field: "clientOpts", Problem: "name no consumer group (kgo.ConsumerGroup)"}
	}
	w.cl = cl
	return w, nil
}

// Client returns the worker's franz-go client, for producing (to a dead-letter topic, say)
// and for metrics. Do not poll it, commit with it or close it: Run does.
func (w *Worker) Client() *kgo.Client { return w.cl }

// ErrClosed is returned by Run when the client was closed under it.
var ErrClosed = errors.New("kafka: client closed")

// Run polls and handles records until ctx is done. Records of one partition are handled one
// at a time, in offset order; partitions are handled concurrently. After each poll's records
// are handled, Run commits the offsets of the settled ones (synchronously) and sets each
// partition that stopped at a record not settled (OutcomeFailed, OutcomeInFlight, or a failed dead-letter)
// back to that record, so that it is fetched again; a rebalance waits until then.
//
// When ctx is done, or a rebalance is pending, the records under way finish (their contexts
// are detached from ctx, so an effect is not cut short), the others of the poll are not
// started and are fetched again by whoever owns their partition next. On ctx done Run then
// commits, leaves the group, closes the client and returns nil. Run is called once; it
// returns ErrClosed if the client was closed under it.
func (w *Worker) Run(ctx context.Context) error {
	defer w.cl.CloseAllowingRebalance()
	stop := context.AfterFunc(ctx, func() { w.hurry.Store(true) })
	defer stop()
	hctx := context.WithoutCancel(ctx)
	for ctx.Err() == nil && !w.dead.Load() {
		fs := w.cl.PollRecords(ctx, w.opt.MaxPollRecords)
		if fs.IsClientClosed() {
			return ErrClosed
		}
		fs.EachError(func(topic string, p int32, err error) {
			if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
				w.opt.Logger.Warn("kafka: fetch", "topic", topic, "partition", p, "err", err)
			}
		})
		w.batch(ctx, hctx, fs)
		if !w.dead.Load() && ctx.Err() == nil {
			// Before AllowRebalance: a rebalance that is signalled in between makes the next
			// poll's records wait, which is harmless; one signalled after must not be lost.
			w.hurry.Store(false)
		}
		w.cl.AllowRebalance()
	}
	if w.dead.Load() {
		return nil
	}
	w.commit(hctx)
	return nil
}

// batch handles the records of one poll, one goroutine per partition, then rewinds the
// partitions that stopped early and commits what was settled.
func (w *Worker) batch(ctx, hctx context.Context, fs kgo.Fetches) {
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		rewinds = map[string]map[int32]kgo.EpochOffset{}
	)
	fs.EachPartition(func(p kgo.FetchTopicPartition) {
		if len(p.Records) == 0 {
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if rec := w.partition(ctx, hctx, p.Records); rec != nil {
				mu.Lock()
				if rewinds[rec.Topic] == nil {
					rewinds[rec.Topic] = map[int32]kgo.EpochOffset{}
				}
				rewinds[rec.Topic][rec.Partition] = kgo.EpochOffset{Epoch: rec.LeaderEpoch, Offset: rec.Offset}
				mu.Unlock()
			}
		}()
	})
	wg.Wait()
	if w.dead.Load() {
		return
	}
	// SetOffsets also marks the rewound offset for commit: every record before it is settled.
	w.cl.SetOffsets(rewinds)
	w.commit(hctx)
}

// partition handles one partition's records in order and returns the first record that is
// not settled (to be fetched again), or nil.
func (w *Worker) partition(ctx, hctx context.Context, recs []*kgo.Record) *kgo.Record {
	for _, rec := range recs {
		if w.hurry.Load() || w.dead.Load() {
			return rec
		}
		r := w.c.Handle(hctx, Message(rec))
		switch r.Outcome {
		case consumer.OutcomeExecuted, consumer.OutcomeReplay:
		case consumer.OutcomeRejected:
			if w.opt.DeadLetter == nil {
				w.opt.Logger.Warn("kafka: rejected record committed past (no DeadLetter set)",
					"topic", rec.Topic, "partition", rec.Partition, "offset", rec.Offset, "key", r.Key, "err", r.Err)
				break
			}
			if err := w.opt.DeadLetter(hctx, rec, r); err != nil {
				w.opt.Logger.Warn("kafka: dead-letter failed; the record is fetched again",
					"topic", rec.Topic, "partition", rec.Partition, "offset", rec.Offset, "err", err)
				w.wait(ctx, w.c.Options().RetryDelay)
				return rec
			}
		default: // Failed, InFlight: not settled; fetch it again after RetryAfter.
			w.wait(ctx, r.RetryAfter)
			return rec
		}
		if w.opt.beforeCommit != nil && w.opt.beforeCommit(r) {
			w.dead.Store(true)
		}
		if w.dead.Load() {
			return nil
		}
		w.cl.MarkCommitRecords(rec)
	}
	return nil
}

// wait sleeps d, cut short when the worker must hurry.
func (w *Worker) wait(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			return
		case <-ctx.Done():
			return
		case <-w.wake:
			if w.hurry.Load() {
				return
			}
		}
	}
}

// commit commits the marked offsets, unless the worker died.
func (w *Worker) commit(ctx context.Context) {
	if w.dead.Load() {
		return
	}
	if err := w.cl.CommitMarkedOffsets(ctx); err != nil {
		w.opt.Logger.Warn("kafka: commit; the records since the last commit will be handled again (as duplicates)", "err", err)
	}
}

// blocked is called (in a goroutine) when a rebalance waits for the poll under way.
func (w *Worker) blocked(context.Context, *kgo.Client) {
	w.hurry.Store(true)
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// revoked commits what is marked before partitions move to another member. With
// BlockRebalanceOnPoll it runs between polls, after batch has committed: it is a safety net.
func (w *Worker) revoked(ctx context.Context, _ *kgo.Client, _ map[string][]int32) {
	w.commit(ctx)
}

// Message returns the consumer.Message for a Kafka record: its value as Body, its headers
// (and its key under KeyHeader), its topic as Subject, and "topic/partition@offset" as ID.
// Kafka has no per-message lease to extend: a record stays with its partition's owner.
func Message(rec *kgo.Record) *consumer.Message {
	m := &consumer.Message{
		Body:    rec.Value,
		Subject: rec.Topic,
		ID:      rec.Topic + "/" + strconv.FormatInt(int64(rec.Partition), 10) + "@" + strconv.FormatInt(rec.Offset, 10),
	}
	if len(rec.Headers) > 0 || rec.Key != nil {
		m.Header = make(map[string][]string, len(rec.Headers)+1)
		for _, h := range rec.Headers {
			m.Header[h.Key] = append(m.Header[h.Key], string(h.Value))
		}
		if rec.Key != nil {
			m.Header[KeyHeader] = []string{string(rec.Key)}
		}
	}
	return m
}

package redisstream

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/internal/retry"
)

// Options configure a Worker. Stream and Group are required; the zero value of every other
// field is a good default.
type Options struct {
	// Stream is the key of the stream. Required.
	Stream string
	// Group is the consumer group. If it does not exist, the worker creates it (and the
	// stream, if need be) starting at StartID. Required.
	Group string
	// Consumer is this worker's name in the group: the owner of the entries it reads until it
	// acks them. Give each process its own (a restarted process may reuse its name). Default:
	// the host name, the process id and a random suffix.
	Consumer string
	// StartID is where a group the worker creates starts: "0" (the default) for every entry
	// already in the stream, "$" for entries added from then on.
	StartID string
	// BodyField is the entry field whose value is Message.Body; the other fields are the
	// Message's Header. Default "body".
	BodyField string
	// Concurrency is how many entries the worker handles at once; it is also how many it
	// reads (XREADGROUP COUNT) or reclaims (XAUTOCLAIM COUNT) at a time. Default 10.
	Concurrency int
	// Block is how long one XREADGROUP waits for new entries. Default 2s.
	Block time.Duration
	// MinIdle is how long an entry must have been pending, delivered and not acked, before
	// XAUTOCLAIM takes it over from its consumer: the redelivery timeout of a consumer that
	// died. While an effect runs, its entry is claimed again every MinIdle/3 (its idle time
	// reset), so that a slow effect is not taken over. Default 30s.
	MinIdle time.Duration
	// ClaimEvery is how often the worker looks for entries idle for MinIdle (XAUTOCLAIM).
	// Default MinIdle/10, at least 100ms.
	ClaimEvery time.Duration
	// DeadLetter, when set, is called with every OutcomeRejected entry before it is acked: add it to
	// a dead-letter stream, for example. If it returns an error the entry is not acked and
	// comes back like a OutcomeFailed one. Default nil: a rejected entry is logged and acked (Redis
	// Streams have no dead-letter of their own).
	DeadLetter func(ctx context.Context, msg redis.XMessage, r consumer.Result) error
	// Logger receives read, ack and claim errors. Default slog.Default().
	Logger *slog.Logger

	// beforeAck, set by tests, is called before an entry is acked; true stops the worker at
	// once, acking nothing more, as if the process died at that instant.
	beforeAck func(consumer.Result) bool
}

func (o Options) withDefaults() (Options, error) {
	switch {
	case o.Stream == "":
		return o, &idem.OptionError{Package: "redisstream", Field: "Options.Stream", Problem: "is required"}
	case o.Group == "":
		return o, &idem.OptionError{Package: "redisstream", Field: "Options.Group", Problem: "is required"}
	case o.Concurrency < 0:
		return o, &idem.OptionError{Package: "redisstream", Field: "Options.Concurrency", Problem: fmt.Sprintf("%d is negative", o.Concurrency)}
	case o.Block < 0:
		return o, &idem.OptionError{Package: "redisstream", Field: "Options.Block", Problem: fmt.Sprintf("%s is negative", o.Block)}
	case o.MinIdle < 0:
		return o, &idem.OptionError{Package: "redisstream", Field: "Options.MinIdle", Problem: fmt.Sprintf("%s is negative", o.MinIdle)}
	case o.ClaimEvery < 0:
		return o, &idem.OptionError{Package: "redisstream", Field: "Options.ClaimEvery", Problem: fmt.Sprintf("%s is negative", o.ClaimEvery)}
	}
	if o.Consumer == "" {
		host, _ := os.Hostname()
		b := make([]byte, 4)
		_, _ = rand.Read(b)
		o.Consumer = fmt.Sprintf("%s-%d-%s", cmp.Or(host, "worker"), os.Getpid(), hex.EncodeToString(b))
	}
	o.StartID = cmp.Or(o.StartID, "0")
	o.BodyField = cmp.Or(o.BodyField, "body")
	o.Concurrency = cmp.Or(o.Concurrency, 10)
	o.Block = cmp.Or(o.Block, 2*time.Second)
	o.MinIdle = cmp.Or(o.MinIdle, 30*time.Second)
	o.ClaimEvery = cmp.Or(o.ClaimEvery, max(o.MinIdle/10, 100*time.Millisecond))
	o.Logger = cmp.Or(o.Logger, slog.Default())
	return o, nil
}

// Worker consumes a Redis stream as a member of a consumer group: it reads new entries
// (XREADGROUP), takes over entries left pending too long by dead consumers (XAUTOCLAIM), hands
// each to a consumer.Consumer and acks it (XACK) only when its outcome is settled. See the
// package documentation.
type Worker struct {
	rdb  redis.UniversalClient
	c    *consumer.Consumer
	opt  Options
	dead atomic.Bool // (tests) the process "died": ack nothing more
}

// NewWorker returns a Worker that runs c on the entries of opt.Stream read through rdb. It
// fails with an error matching idem.ErrInvalidInput, naming the field, when an argument or
// option is invalid.
func NewWorker(rdb redis.UniversalClient, c *consumer.Consumer, opt Options) (*Worker, error) {
	switch {
	case rdb == nil:
		return nil, &idem.OptionError{Package: "redisstream", Field: "client", Problem: "is nil"}
	case c == nil:
		return nil, &idem.OptionError{Package: "redisstream", Field: "consumer", Problem: "is nil"}
	}
	opt, err := opt.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Worker{rdb: rdb, c: c, opt: opt}, nil
}

// Options returns the worker's options with defaults filled in.
func (w *Worker) Options() Options { return w.opt }

// Run creates the group if it does not exist, then reads, reclaims and handles entries with
// opt.Concurrency handlers until ctx is done. Then it stops gracefully: it reads nothing more,
// lets the handlers under way finish (their contexts are detached from ctx, so an effect is not
// cut short) and acks their entries, and returns nil. Entries it had read but not started stay
// pending in its name and are reclaimed after MinIdle (by this worker's successor, or another).
// Run returns an error when the group cannot be created.
func (w *Worker) Run(ctx context.Context) error {
	err := w.rdb.XGroupCreateMkStream(ctx, w.opt.Stream, w.opt.Group, w.opt.StartID).Err()
	if err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
		return fmt.Errorf("redisstream: create group %q on %q: %w", w.opt.Group, w.opt.Stream, err)
	}
	hctx := context.WithoutCancel(ctx)
	jobs := make(chan redis.XMessage)
	var handlers sync.WaitGroup
	for range w.opt.Concurrency {
		handlers.Add(1)
		go func() {
			defer handlers.Done()
			for msg := range jobs {
				w.handle(hctx, msg)
			}
		}()
	}
	var feeders sync.WaitGroup
	feeders.Add(2)
	go func() { defer feeders.Done(); w.read(ctx, jobs) }()
	go func() { defer feeders.Done(); w.reclaim(ctx, jobs) }()
	feeders.Wait()
	close(jobs)
	handlers.Wait()
	return nil
}

// feed hands msgs to the handlers; false when ctx is done first (the rest stay pending).
func (w *Worker) feed(ctx context.Context, jobs chan<- redis.XMessage, msgs []redis.XMessage) bool {
	for _, m := range msgs {
		select {
		case jobs <- m:
		case <-ctx.Done():
			return false
		}
	}
	return true
}

// read reads new entries until ctx is done.
func (w *Worker) read(ctx context.Context, jobs chan<- redis.XMessage) {
	for ctx.Err() == nil && !w.dead.Load() {
		streams, err := w.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{
			Group: w.opt.Group, Consumer: w.opt.Consumer, Streams: []string{w.opt.Stream, ">"},
			Count: int64(w.opt.Concurrency), Block: w.opt.Block,
		}).Result()
		switch {
		case errors.Is(err, redis.Nil):
			continue
		case err != nil:
			if ctx.Err() == nil {
				w.opt.Logger.Warn("redisstream: read", "stream", w.opt.Stream, "err", err)
				_ = retry.Sleep(ctx, time.Second)
			}
			continue
		}
		for _, s := range streams {
			if !w.feed(ctx, jobs, s.Messages) {
				return
			}
		}
	}
}

// reclaim takes over entries pending for MinIdle, every ClaimEvery, until ctx is done.
func (w *Worker) reclaim(ctx context.Context, jobs chan<- redis.XMessage) {
	start := "0-0"
	for retry.Sleep(ctx, w.opt.ClaimEvery) == nil && !w.dead.Load() {
		msgs, next, err := w.rdb.XAutoClaim(ctx, &redis.XAutoClaimArgs{
			Stream: w.opt.Stream, Group: w.opt.Group, Consumer: w.opt.Consumer,
			MinIdle: w.opt.MinIdle, Start: start, Count: int64(w.opt.Concurrency),
		}).Result()
		if err != nil {
			if ctx.Err() == nil {
				w.opt.Logger.Warn("redisstream: autoclaim", "stream", w.opt.Stream, "err", err)
			}
			continue
		}
		start = next
		if !w.feed(ctx, jobs, msgs) {
			return
		}
	}
}

// handle runs one entry and settles it.
func (w *Worker) handle(ctx context.Context, msg redis.XMessage) {
	if w.dead.Load() {
		return
	}
	r := w.c.Handle(ctx, w.message(msg))
	switch r.Outcome {
	case consumer.OutcomeExecuted, consumer.OutcomeReplay:
	case consumer.OutcomeRejected:
		if w.opt.DeadLetter == nil {
			w.opt.Logger.Warn("redisstream: rejected entry acked (no DeadLetter set)",
				"stream", w.opt.Stream, "id", msg.ID, "key", r.Key, "err", r.Err)
			break
		}
		if err := w.opt.DeadLetter(ctx, msg, r); err != nil {
			w.opt.Logger.Warn("redisstream: dead-letter failed; the entry comes back", "stream", w.opt.Stream, "id", msg.ID, "err", err)
			w.retryAfter(ctx, msg.ID, w.c.Options().RetryDelay)
			return
		}
	default: // Failed, InFlight: leave it pending; it comes back after RetryAfter.
		w.retryAfter(ctx, msg.ID, r.RetryAfter)
		return
	}
	if w.opt.beforeAck != nil && w.opt.beforeAck(r) {
		w.dead.Store(true)
	}
	if w.dead.Load() {
		return
	}
	if err := w.rdb.XAck(ctx, w.opt.Stream, w.opt.Group, msg.ID).Err(); err != nil {
		w.opt.Logger.Warn("redisstream: ack failed; the entry is reclaimed after MinIdle and handled again (as a duplicate)",
			"stream", w.opt.Stream, "id", msg.ID, "err", err)
	}
}

// retryAfter makes a pending entry look idle for MinIdle-d, so that XAUTOCLAIM takes it again
// after d rather than after MinIdle (Redis cannot delay a redelivery otherwise).
func (w *Worker) retryAfter(ctx context.Context, id string, d time.Duration) {
	if w.dead.Load() {
		return
	}
	idle := max(w.opt.MinIdle-d, 0)
	err := w.rdb.Do(ctx, "XCLAIM", w.opt.Stream, w.opt.Group, w.opt.Consumer, 0, id,
		"IDLE", idle.Milliseconds(), "JUSTID").Err()
	if err != nil {
		w.opt.Logger.Warn("redisstream: could not shorten the redelivery; the entry comes back after MinIdle",
			"stream", w.opt.Stream, "id", id, "err", err)
	}
}

// message maps an entry, with an Extend hook that claims it again (resetting its idle time).
func (w *Worker) message(msg redis.XMessage) *consumer.Message {
	m := Message(msg, w.opt.BodyField)
	m.Subject = w.opt.Stream
	m.ExtendEvery = w.opt.MinIdle / 3
	m.Extend = func(ctx context.Context) error {
		if w.dead.Load() {
			return nil
		}
		return w.rdb.XClaimJustID(ctx, &redis.XClaimArgs{Stream: w.opt.Stream, Group: w.opt.Group,
			Consumer: w.opt.Consumer, Messages: []string{msg.ID}}).Err()
	}
	return m
}

// Message returns the consumer.Message for a stream entry: the value of bodyField as Body, the
// other fields as Header, the entry id as ID. Values that are not strings are formatted with
// fmt.Sprint.
func Message(msg redis.XMessage, bodyField string) *consumer.Message {
	m := &consumer.Message{ID: msg.ID}
	for k, v := range msg.Values {
		s, ok := v.(string)
		if !ok {
			s = fmt.Sprint(v)
		}
		if k == bodyField {
			m.Body = []byte(s)
			continue
		}
		if m.Header == nil {
			m.Header = make(map[string][]string, len(msg.Values))
		}
		m.Header[k] = []string{s}
	}
	return m
}

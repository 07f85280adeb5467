package natsjs

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/consumer"
)

// Options configure Run and Handler. The zero value is a good default for every field.
type Options struct {
	// Concurrency is how many messages Run handles at once; it is also how many messages the
	// client buffers (jetstream.PullMaxMessages). Default 10. Handler ignores it.
	Concurrency int
	// InProgressEvery is how often a message whose effect still runs is marked in progress
	// (Msg.InProgress), which resets the consumer's AckWait so that the message is not
	// redelivered meanwhile. Default: a third of the consumer's AckWait as Run finds it in the
	// consumer's cached info, or 10s (a third of JetStream's default AckWait) for Handler and
	// when it is unknown. Negative disables it.
	InProgressEvery time.Duration
	// Logger receives ack and consume errors. Default slog.Default().
	Logger *slog.Logger

	// beforeAck, set by tests, is called before a message is acked; true skips the ack, as if
	// the process died at that instant.
	beforeAck func(consumer.Result) bool
}

func (o Options) withDefaults() (Options, error) {
	o.Concurrency = cmp.Or(o.Concurrency, 10)
	o.InProgressEvery = cmp.Or(o.InProgressEvery, 10*time.Second)
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Concurrency < 1 {
		return o, &idem.OptionError{Package: "natsjs", Field: "Options.Concurrency", Problem: fmt.Sprintf("%d is below 1", o.Concurrency)}
	}
	return o, nil
}

// Message returns the consumer.Message for a JetStream message: its data, headers, subject,
// stream sequence as ID, and an Extend hook that calls msg.InProgress every every (none when
// every is not positive).
func Message(msg jetstream.Msg, every time.Duration) *consumer.Message {
	m := &consumer.Message{Body: msg.Data(), Subject: msg.Subject()}
	if h := msg.Headers(); len(h) > 0 {
		m.Header = h
	}
	if md, err := msg.Metadata(); err == nil {
		m.ID = md.Stream + ":" + strconv.FormatUint(md.Sequence.Stream, 10)
		m.Redelivered = md.NumDelivered > 1
	}
	if every > 0 {
		m.Extend = func(context.Context) error { return msg.InProgress() }
		m.ExtendEvery = every
	}
	return m
}

// Settle tells JetStream what became of msg, as r says: Ack for OutcomeExecuted and OutcomeReplay;
// NakWithDelay(r.RetryAfter) for OutcomeInFlight; Nak (with r.RetryAfter as its delay, if any) for
// OutcomeFailed; Term for OutcomeRejected, so that JetStream never redelivers it (the server publishes a
// $JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED advisory, to which a dead-letter handler may
// subscribe).
func Settle(msg jetstream.Msg, r consumer.Result) error {
	switch r.Outcome {
	case consumer.OutcomeExecuted, consumer.OutcomeReplay:
		return msg.Ack()
	case consumer.OutcomeInFlight:
		return msg.NakWithDelay(max(r.RetryAfter, time.Millisecond))
	case consumer.OutcomeRejected:
		// Term, not TermWithReason: servers before 2.10.4 ignore a Term with a reason and
		// redeliver the message.
		return msg.Term()
	default:
		if r.RetryAfter > 0 {
			return msg.NakWithDelay(r.RetryAfter)
		}
		return msg.Nak()
	}
}

// Handler returns a jetstream.MessageHandler, for a Consume the caller runs itself, that
// handles each message with c on ctx and settles it (see Settle), one at a time. It fails with
// an error matching idem.ErrInvalidInput when an option is invalid.
func Handler(ctx context.Context, c *consumer.Consumer, opt Options) (jetstream.MessageHandler, error) {
	if c == nil {
		return nil, &idem.OptionError{Package: "natsjs", Field: "consumer", Problem: "is nil"}
	}
	opt, err := opt.withDefaults()
	if err != nil {
		return nil, err
	}
	return func(msg jetstream.Msg) { handle(ctx, c, opt, msg) }, nil
}

func handle(ctx context.Context, c *consumer.Consumer, opt Options, msg jetstream.Msg) {
	r := c.Handle(ctx, Message(msg, opt.InProgressEvery))
	if r.Outcome.Ack() && opt.beforeAck != nil && opt.beforeAck(r) {
		return
	}
	if err := Settle(msg, r); err != nil {
		opt.Logger.Warn("natsjs: could not settle message; JetStream redelivers it after AckWait",
			"subject", msg.Subject(), "outcome", r.Outcome.String(), "err", err)
	}
}

// ErrClosed is returned by Run when the NATS connection closed under it.
var ErrClosed = errors.New("natsjs: connection closed")

// Run consumes cons with opt.Concurrency handlers until ctx is done, handling every message
// with c and settling it (see Settle). Then it stops gracefully: it takes no new message, lets
// the handlers under way finish (their contexts are detached from ctx, so an effect is not cut
// short) and settles their messages, naks the messages it had received but not started, and
// returns nil. Messages the client had buffered but not yet passed on come back after the
// consumer's AckWait. Run returns ErrClosed if the connection closes, and an error matching
// idem.ErrInvalidInput when an option is invalid.
func Run(ctx context.Context, cons jetstream.Consumer, c *consumer.Consumer, opt Options) error {
	switch {
	case cons == nil:
		return &idem.OptionError{Package: "natsjs", Field: "cons", Problem: "is nil"}
	case c == nil:
		return &idem.OptionError{Package: "natsjs", Field: "consumer", Problem: "is nil"}
	}
	if opt.InProgressEvery == 0 {
		if info := cons.CachedInfo(); info != nil && info.Config.AckWait > 0 {
			opt.InProgressEvery = info.Config.AckWait / 3
		}
	}
	opt, err := opt.withDefaults()
	if err != nil {
		return err
	}
	hctx := context.WithoutCancel(ctx)
	jobs := make(chan jetstream.Msg)
	quit := make(chan struct{})
	cc, err := cons.Consume(func(msg jetstream.Msg) {
		select {
		case jobs <- msg:
		case <-quit:
			_ = msg.Nak()
		}
	}, jetstream.PullMaxMessages(opt.Concurrency), jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		opt.Logger.Warn("natsjs: consume", "err", err)
	}))
	if err != nil {
		return fmt.Errorf("natsjs: consume: %w", err)
	}
	var wg sync.WaitGroup
	for range opt.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case msg := <-jobs:
					handle(hctx, c, opt, msg)
				case <-quit:
					return
				}
			}
		}()
	}
	var result error
	select {
	case <-ctx.Done():
	case <-cc.Closed():
		result = ErrClosed
	}
	cc.Stop()
	close(quit)
	wg.Wait()
	return result
}

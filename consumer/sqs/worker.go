package sqs

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/idemkit/idem"
	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/internal/retry"
)

// API is the part of the SQS client the Worker uses; *sqs.Client from
// github.com/aws/aws-sdk-go-v2/service/sqs implements it.
type API interface {
	ReceiveMessage(ctx context.Context, in *awssqs.ReceiveMessageInput, opts ...func(*awssqs.Options)) (*awssqs.ReceiveMessageOutput, error)
	DeleteMessage(ctx context.Context, in *awssqs.DeleteMessageInput, opts ...func(*awssqs.Options)) (*awssqs.DeleteMessageOutput, error)
	ChangeMessageVisibility(ctx context.Context, in *awssqs.ChangeMessageVisibilityInput, opts ...func(*awssqs.Options)) (*awssqs.ChangeMessageVisibilityOutput, error)
}

var _ API = (*awssqs.Client)(nil)

// Limits SQS puts on the Worker's options.
const (
	maxBatch      = 10
	maxWait       = 20 * time.Second
	maxVisibility = 12 * time.Hour
)

// WorkerOptions configure a Worker. Only QueueURL is required.
type WorkerOptions struct {
	// QueueURL is the queue to consume. Required.
	QueueURL string
	// MaxMessages is the most messages one receive asks for, 1 to 10. A receive never asks for
	// more than there are free handler slots. Default 10.
	MaxMessages int
	// WaitTime is how long a receive waits for messages (long polling), at most 20s. Default
	// 20s; negative for short polling.
	WaitTime time.Duration
	// VisibilityTimeout is how long a received message stays hidden from other consumers; the
	// Worker extends it while the handler runs. Whole seconds, 1s to 12h. Default 30s.
	VisibilityTimeout time.Duration
	// ExtendEvery is how often the visibility of a message being handled is extended (to
	// VisibilityTimeout from then). Default VisibilityTimeout/3; negative disables extension.
	ExtendEvery time.Duration
	// Concurrency is how many messages are handled at once. Default 10.
	Concurrency int
	// ShutdownTimeout bounds how long Run, once its context is done, waits for handlers to
	// finish before it cancels their contexts. Default 0: it waits for them, however long.
	ShutdownTimeout time.Duration
	// KeepSNSEnvelope hands the handler the SNS envelope as the body instead of taking it off.
	// Default false: envelopes are taken off (see UnwrapSNS).
	KeepSNSEnvelope bool
	// Logger receives receive, delete and visibility errors. Default slog.Default().
	Logger *slog.Logger

	// beforeDelete, set by tests, is called before a message is deleted; true skips the
	// delete, as if the process died at that instant.
	beforeDelete func(consumer.Result) bool
}

// Stats counts what a Worker did. All counts are since NewWorker.
type Stats struct {
	// Received counts messages received.
	Received int64
	// Deleted counts messages deleted (OutcomeExecuted or OutcomeReplay).
	Deleted int64
	// Failed counts OutcomeFailed and OutcomeRejected messages (left for redelivery and, in the end, the
	// queue's redrive policy).
	Failed int64
	// InFlight counts messages deferred because another consumer held their key.
	InFlight int64
	// Extended counts successful visibility extensions.
	Extended int64
	// Errors counts SQS calls that failed (receive, delete, visibility change).
	Errors int64
}

// Worker consumes one SQS queue through a *consumer.Consumer: it long-polls in batches, hands
// each message to Consumer.Handle with bounded concurrency, keeps the message hidden while the
// effect runs, and settles it as the Result says (see Settle): deleted when OutcomeExecuted or a
// OutcomeReplay, hidden for Result.RetryAfter when OutcomeInFlight elsewhere, left for redelivery when
// OutcomeFailed or OutcomeRejected.
type Worker struct {
	api   API
	c     *consumer.Consumer
	opt   WorkerOptions
	log   *slog.Logger
	stats struct{ received, deleted, failed, inFlight, extended, errors atomic.Int64 }
}

// NewWorker returns a Worker that hands the messages of opt.QueueURL to c. It fails with an
// error matching idem.ErrInvalidInput, naming the field, if an argument or option is invalid.
func NewWorker(api API, c *consumer.Consumer, opt WorkerOptions) (*Worker, error) {
	switch {
	case api == nil:
		return nil, &idem.OptionError{Package: "sqs", Field: "api", Problem: "is nil"}
	case c == nil:
		return nil, &idem.OptionError{Package: "sqs", Field: "consumer", Problem: "is nil"}
	case opt.QueueURL == "":
		return nil, &idem.OptionError{Package: "sqs", Field: "WorkerOptions.QueueURL", Problem: "is required"}
	}
	opt.MaxMessages = cmp.Or(opt.MaxMessages, maxBatch)
	opt.WaitTime = cmp.Or(opt.WaitTime, maxWait)
	opt.VisibilityTimeout = cmp.Or(opt.VisibilityTimeout, 30*time.Second)
	opt.ExtendEvery = cmp.Or(opt.ExtendEvery, opt.VisibilityTimeout/3)
	opt.Concurrency = cmp.Or(opt.Concurrency, 10)
	switch {
	case opt.MaxMessages < 1 || opt.MaxMessages > maxBatch:
		return nil, &idem.OptionError{Package: "sqs", Field: "WorkerOptions.MaxMessages", Problem: fmt.Sprintf("%d is not within 1..%d", opt.MaxMessages, maxBatch)}
	case opt.WaitTime > maxWait:
		return nil, &idem.OptionError{Package: "sqs", Field: "WorkerOptions.WaitTime", Problem: fmt.Sprintf("%s is above %s", opt.WaitTime, maxWait)}
	case opt.VisibilityTimeout < time.Second || opt.VisibilityTimeout > maxVisibility || opt.VisibilityTimeout%time.Second != 0:
		return nil, &idem.OptionError{Package: "sqs", Field: "WorkerOptions.VisibilityTimeout", Problem: fmt.Sprintf("%s is not whole seconds within 1s..12h", opt.VisibilityTimeout)}
	case opt.ExtendEvery >= opt.VisibilityTimeout:
		return nil, &idem.OptionError{Package: "sqs", Field: "WorkerOptions.ExtendEvery", Problem: fmt.Sprintf("%s must be shorter than VisibilityTimeout %s", opt.ExtendEvery, opt.VisibilityTimeout)}
	case opt.Concurrency < 1:
		return nil, &idem.OptionError{Package: "sqs", Field: "WorkerOptions.Concurrency", Problem: fmt.Sprintf("%d is below 1", opt.Concurrency)}
	case opt.ShutdownTimeout < 0:
		return nil, &idem.OptionError{Package: "sqs", Field: "WorkerOptions.ShutdownTimeout", Problem: fmt.Sprintf("%s is negative", opt.ShutdownTimeout)}
	}
	w := &Worker{api: api, c: c, opt: opt, log: cmp.Or(opt.Logger, slog.Default())}
	return w, nil
}

// Stats returns what the Worker has done so far.
func (w *Worker) Stats() Stats {
	return Stats{
		Received: w.stats.received.Load(),
		Deleted:  w.stats.deleted.Load(),
		Failed:   w.stats.failed.Load(),
		InFlight: w.stats.inFlight.Load(),
		Extended: w.stats.extended.Load(),
		Errors:   w.stats.errors.Load(),
	}
}

// Run consumes the queue until ctx is done, then stops gracefully: it receives no more, lets
// the handlers under way finish (their contexts are not cancelled with ctx; see
// WorkerOptions.ShutdownTimeout), deletes the messages they finished, and returns nil. A
// receive under way at the stop is let finish (within WaitTime) and its messages are handled
// too, rather than being abandoned to come back only after their visibility timeout. So Run
// returns within WaitTime plus the time the handlers take. Receive errors are logged and retried with backoff; Run returns an
// error early only when the queue does not exist.
func (w *Worker) Run(ctx context.Context) error {
	// Handlers run on hctx: detached from ctx, cancelled only when the shutdown timeout runs
	// out after ctx is done.
	hctx, cancelHandlers := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelHandlers()
	var wg sync.WaitGroup
	slots := make(chan struct{}, w.opt.Concurrency)
	err := w.receiveLoop(ctx, hctx, slots, &wg)

	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	if w.opt.ShutdownTimeout > 0 {
		t := time.NewTimer(w.opt.ShutdownTimeout)
		defer t.Stop()
		select {
		case <-done:
		case <-t.C:
			w.log.Warn("consumer/sqs: shutdown timeout; cancelling handlers", "queue", w.opt.QueueURL)
			cancelHandlers()
		}
	}
	<-done
	return err
}

func (w *Worker) receiveLoop(ctx, hctx context.Context, slots chan struct{}, wg *sync.WaitGroup) error {
	wait := int32(max(w.opt.WaitTime, 0) / time.Second)
	vis := int32(w.opt.VisibilityTimeout / time.Second)
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		// Ask only for as many messages as there are free slots, so none waits hidden while
		// its visibility timeout runs.
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return nil
		}
		n := 1
		for n < w.opt.MaxMessages {
			select {
			case slots <- struct{}{}:
				n++
				continue
			default:
			}
			break
		}
		// The receive is not cancelled by a stop: a long poll abandoned mid-way can still take
		// messages off the queue, which then stay hidden for a whole visibility timeout. It
		// ends within the wait time, and what it returns is handled before Run returns.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), max(w.opt.WaitTime, 0)+sqsCallTimeout)
		out, err := w.api.ReceiveMessage(rctx, &awssqs.ReceiveMessageInput{
			QueueUrl:              aws.String(w.opt.QueueURL),
			MaxNumberOfMessages:   int32(n),
			WaitTimeSeconds:       wait,
			VisibilityTimeout:     vis,
			MessageAttributeNames: []string{"All"},
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{
				types.MessageSystemAttributeNameApproximateReceiveCount,
				types.MessageSystemAttributeNameSentTimestamp,
			},
		})
		cancel()
		var msgs []types.Message
		if out != nil {
			msgs = out.Messages
		}
		for range n - len(msgs) {
			<-slots
		}
		if err != nil {
			if _, ok := errors.AsType[*types.QueueDoesNotExist](err); ok {
				return fmt.Errorf("consumer/sqs: receive from %s: %w", w.opt.QueueURL, err)
			}
			if ctx.Err() != nil {
				return nil
			}
			w.stats.errors.Add(1)
			w.log.Warn("consumer/sqs: receive failed; retrying", "queue", w.opt.QueueURL, "err", err, "backoff", backoff)
			if retry.Sleep(ctx, backoff) != nil {
				return nil
			}
			backoff = min(backoff*2, 10*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
		w.stats.received.Add(int64(len(msgs)))
		for _, in := range msgs {
			wg.Go(func() {
				defer func() { <-slots }()
				w.handle(hctx, in)
			})
		}
	}
	return nil
}

// handle runs one message through the consumer and settles it.
func (w *Worker) handle(ctx context.Context, in types.Message) {
	m := Message(in, w.opt.QueueURL, w.opt.KeepSNSEnvelope)
	receipt := deref(in.ReceiptHandle)
	if w.opt.ExtendEvery > 0 {
		m.ExtendEvery = w.opt.ExtendEvery
		m.Extend = func(ctx context.Context) error {
			if err := w.setVisibility(ctx, receipt, w.opt.VisibilityTimeout); err != nil {
				return err
			}
			w.stats.extended.Add(1)
			return nil
		}
	}
	r := w.c.Handle(ctx, m)
	// The effect is done with: settling must happen even if its context was cancelled.
	ctx = context.WithoutCancel(ctx)
	switch r.Outcome {
	case consumer.OutcomeExecuted, consumer.OutcomeReplay:
		if w.opt.beforeDelete != nil && w.opt.beforeDelete(r) {
			return
		}
	case consumer.OutcomeInFlight:
		w.stats.inFlight.Add(1)
	default:
		w.stats.failed.Add(1)
		w.log.Debug("consumer/sqs: message not handled; left for redelivery", "queue", w.opt.QueueURL,
			"message_id", m.ID, "outcome", r.Outcome.String(), "err", r.Err)
	}
	err := w.settle(ctx, receipt, r)
	switch {
	case err != nil && r.Outcome.Ack():
		w.stats.errors.Add(1)
		w.log.Warn("consumer/sqs: could not delete handled message; it will be redelivered and found a duplicate",
			"queue", w.opt.QueueURL, "message_id", m.ID, "err", err)
	case err != nil:
		w.stats.errors.Add(1)
		w.log.Warn("consumer/sqs: could not change message visibility", "queue", w.opt.QueueURL,
			"message_id", m.ID, "err", err)
	case r.Outcome.Ack():
		w.stats.deleted.Add(1)
	}
}

// settle deletes the message, retrying briefly, or changes its visibility, as r says.
func (w *Worker) settle(ctx context.Context, receipt string, r consumer.Result) error {
	backoff := 50 * time.Millisecond
	for attempt := 1; ; attempt++ {
		err := Settle(ctx, w.api, w.opt.QueueURL, receipt, r)
		if err == nil || !r.Outcome.Ack() || attempt == 3 {
			return err
		}
		if _, invalid := errors.AsType[*types.ReceiptHandleIsInvalid](err); invalid {
			return err
		}
		if retry.Sleep(ctx, backoff) != nil {
			return err
		}
		backoff *= 2
	}
}

// Settle tells SQS what became of the message received with receipt, as r says: for OutcomeExecuted
// and OutcomeReplay it deletes the message; for OutcomeInFlight, and for OutcomeFailed with a RetryAfter, it
// hides the message for r.RetryAfter (rounded up to whole seconds, at least 1s, at most 12h),
// after which SQS redelivers it; for OutcomeFailed without a RetryAfter, and for OutcomeRejected, it does
// nothing, so that the message comes back when its visibility timeout ends and, after the
// queue's maxReceiveCount, moves to its dead-letter queue (SQS has no way to dead-letter a
// message at once). Each call is bounded by 10s.
func Settle(ctx context.Context, api API, queueURL, receipt string, r consumer.Result) error {
	cctx, cancel := context.WithTimeout(ctx, sqsCallTimeout)
	defer cancel()
	switch {
	case r.Outcome.Ack():
		_, err := api.DeleteMessage(cctx, &awssqs.DeleteMessageInput{QueueUrl: aws.String(queueURL), ReceiptHandle: aws.String(receipt)})
		return err
	case r.Outcome == consumer.OutcomeInFlight || r.Outcome == consumer.OutcomeFailed && r.RetryAfter > 0:
		return changeVisibility(cctx, api, queueURL, receipt, max(r.RetryAfter, time.Second))
	}
	return nil
}

// sqsCallTimeout bounds each SQS call made for one message.
const sqsCallTimeout = 10 * time.Second

func (w *Worker) setVisibility(ctx context.Context, receipt string, d time.Duration) error {
	cctx, cancel := context.WithTimeout(ctx, sqsCallTimeout)
	defer cancel()
	err := changeVisibility(cctx, w.api, w.opt.QueueURL, receipt, d)
	if err != nil {
		w.stats.errors.Add(1)
	}
	return err
}

func changeVisibility(ctx context.Context, api API, queueURL, receipt string, d time.Duration) error {
	secs := int32(min((d+time.Second-1)/time.Second, maxVisibility/time.Second))
	_, err := api.ChangeMessageVisibility(ctx, &awssqs.ChangeMessageVisibilityInput{
		QueueUrl:          aws.String(queueURL),
		ReceiptHandle:     aws.String(receipt),
		VisibilityTimeout: secs,
	})
	return err
}

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
	// RetryDelay is how long a message whose handler failed stays hidden before it is
	// redelivered (rounded up to whole seconds, at most 12h). Default 0: it is left as it is and
	// comes back when its current visibility timeout ends. (A message in flight elsewhere
	// follows InFlightDelay instead.)
	RetryDelay time.Duration
	// InFlightDelay is how long a message stays hidden when its handler's error matches
	// idem.ErrInFlight (another consumer holds its key now), rounded up to whole seconds; it is
	// shortened to the *idem.InFlightError's RetryAfter when that is sooner, so that a crashed
	// holder's lease is taken over as soon as it runs out. At most 12h. Default 2s: the holder
	// usually finishes within it, and the redelivery is then a cheap duplicate.
	InFlightDelay time.Duration
	// ShutdownTimeout bounds how long Run, once its context is done, waits for handlers to
	// finish before it cancels their contexts. Default 0: it waits for them, however long.
	ShutdownTimeout time.Duration
	// KeepSNSEnvelope hands the handler the SNS envelope as the body instead of taking it off.
	// Default false: envelopes are taken off (see UnwrapSNS).
	KeepSNSEnvelope bool
	// Logger receives receive, delete and visibility errors. Default slog.Default().
	Logger *slog.Logger
}

// Stats counts what a Worker did. All counts are since NewWorker.
type Stats struct {
	// Received counts messages received.
	Received int64
	// Deleted counts messages whose handler returned nil and that were deleted.
	Deleted int64
	// Failed counts messages whose handler returned an error (left for redelivery).
	Failed int64
	// InFlight counts messages deferred because another consumer held their key.
	InFlight int64
	// Extended counts successful visibility extensions.
	Extended int64
	// Errors counts SQS calls that failed (receive, delete, visibility change).
	Errors int64
}

// Worker consumes one SQS queue: it long-polls in batches, hands each message to a Handler
// with bounded concurrency, keeps the message hidden while the handler runs, deletes it when
// the handler returns nil and leaves it for redelivery otherwise.
//
// The Worker delivers at least once: a crash, a failed delete or a visibility timeout that ran
// out redelivers a message. Make the handler idempotent (see the package documentation): the
// Worker itself does not deduplicate.
type Worker struct {
	api   API
	h     Handler
	opt   WorkerOptions
	log   *slog.Logger
	stats struct{ received, deleted, failed, inFlight, extended, errors atomic.Int64 }
}

// NewWorker returns a Worker that hands the messages of opt.QueueURL to h. It fails with an
// error matching idem.ErrInvalidInput, naming the field, if an option is out of range.
func NewWorker(api API, h Handler, opt WorkerOptions) (*Worker, error) {
	switch {
	case api == nil:
		return nil, fmt.Errorf("%w: NewWorker: API is nil", errInvalid)
	case h == nil:
		return nil, fmt.Errorf("%w: NewWorker: Handler is nil", errInvalid)
	case opt.QueueURL == "":
		return nil, fmt.Errorf("%w: WorkerOptions.QueueURL is required", errInvalid)
	}
	opt.MaxMessages = cmp.Or(opt.MaxMessages, maxBatch)
	opt.WaitTime = cmp.Or(opt.WaitTime, maxWait)
	opt.VisibilityTimeout = cmp.Or(opt.VisibilityTimeout, 30*time.Second)
	opt.ExtendEvery = cmp.Or(opt.ExtendEvery, opt.VisibilityTimeout/3)
	opt.Concurrency = cmp.Or(opt.Concurrency, 10)
	opt.InFlightDelay = cmp.Or(opt.InFlightDelay, 2*time.Second)
	switch {
	case opt.MaxMessages < 1 || opt.MaxMessages > maxBatch:
		return nil, fmt.Errorf("%w: WorkerOptions.MaxMessages %d is not within 1..%d", errInvalid, opt.MaxMessages, maxBatch)
	case opt.WaitTime > maxWait:
		return nil, fmt.Errorf("%w: WorkerOptions.WaitTime %s is above %s", errInvalid, opt.WaitTime, maxWait)
	case opt.VisibilityTimeout < time.Second || opt.VisibilityTimeout > maxVisibility || opt.VisibilityTimeout%time.Second != 0:
		return nil, fmt.Errorf("%w: WorkerOptions.VisibilityTimeout %s is not whole seconds within 1s..12h", errInvalid, opt.VisibilityTimeout)
	case opt.ExtendEvery >= opt.VisibilityTimeout:
		return nil, fmt.Errorf("%w: WorkerOptions.ExtendEvery %s must be shorter than VisibilityTimeout %s", errInvalid, opt.ExtendEvery, opt.VisibilityTimeout)
	case opt.Concurrency < 1:
		return nil, fmt.Errorf("%w: WorkerOptions.Concurrency %d is below 1", errInvalid, opt.Concurrency)
	case opt.RetryDelay < 0 || opt.RetryDelay > maxVisibility:
		return nil, fmt.Errorf("%w: WorkerOptions.RetryDelay %s is not within 0..12h", errInvalid, opt.RetryDelay)
	case opt.InFlightDelay < 0 || opt.InFlightDelay > maxVisibility:
		return nil, fmt.Errorf("%w: WorkerOptions.InFlightDelay %s is not within 0..12h", errInvalid, opt.InFlightDelay)
	case opt.ShutdownTimeout < 0:
		return nil, fmt.Errorf("%w: WorkerOptions.ShutdownTimeout %s is negative", errInvalid, opt.ShutdownTimeout)
	}
	w := &Worker{api: api, h: h, opt: opt, log: cmp.Or(opt.Logger, slog.Default())}
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
		received := time.Now()
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
			if !sleep(ctx, backoff) {
				return nil
			}
			backoff = min(backoff*2, 10*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
		w.stats.received.Add(int64(len(msgs)))
		for _, in := range msgs {
			m := fromSQS(in, w.opt.KeepSNSEnvelope)
			wg.Go(func() {
				defer func() { <-slots }()
				w.handle(hctx, m, received)
			})
		}
	}
	return nil
}

// handle runs the handler on one message and deletes it, defers it or leaves it.
func (w *Worker) handle(ctx context.Context, m *Message, received time.Time) {
	stop := w.keepHidden(ctx, m, received)
	err := w.call(ctx, m)
	stop()
	// The handler is done: what follows must happen even if its context was cancelled.
	ctx = context.WithoutCancel(ctx)
	switch {
	case err == nil:
		w.delete(ctx, m)
	case errors.Is(err, idem.ErrInFlight):
		w.stats.inFlight.Add(1)
		after := w.opt.InFlightDelay
		if ife, ok := errors.AsType[*idem.InFlightError](err); ok {
			after = min(ife.RetryAfter, after)
		}
		after = max(after, time.Second)
		w.setVisibility(ctx, m, after)
	default:
		w.stats.failed.Add(1)
		w.log.Debug("consumer/sqs: handler failed; message left for redelivery", "queue", w.opt.QueueURL,
			"message_id", m.MessageID, "err", err)
		if w.opt.RetryDelay > 0 {
			w.setVisibility(ctx, m, w.opt.RetryDelay)
		}
	}
}

// call runs the handler; a panic is a failure of this message, not of the worker.
func (w *Worker) call(ctx context.Context, m *Message) (err error) {
	defer func() {
		if p := recover(); p != nil {
			w.log.Error("consumer/sqs: handler panicked", "queue", w.opt.QueueURL, "message_id", m.MessageID, "panic", p)
			err = fmt.Errorf("consumer/sqs: handler panicked: %v", p)
		}
	}()
	return w.h(ctx, m)
}

// keepHidden extends the message's visibility every ExtendEvery while the handler runs. The
// returned func stops it and waits for an extension under way, so that no extension lands after
// the message was deleted or its visibility set for a retry.
func (w *Worker) keepHidden(ctx context.Context, m *Message, received time.Time) (stop func()) {
	if w.opt.ExtendEvery <= 0 || m.ReceiptHandle == "" {
		return func() {}
	}
	var mu sync.Mutex
	stopped := false
	var t *time.Timer
	extend := func() {
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			return
		}
		if w.setVisibility(ctx, m, w.opt.VisibilityTimeout) {
			w.stats.extended.Add(1)
		}
		t.Reset(w.opt.ExtendEvery)
	}
	mu.Lock()
	t = time.AfterFunc(max(time.Until(received.Add(w.opt.ExtendEvery)), 0), extend)
	mu.Unlock()
	return func() {
		mu.Lock()
		stopped = true
		t.Stop()
		mu.Unlock()
	}
}

// sqsCallTimeout bounds each SQS call made for one message.
const sqsCallTimeout = 10 * time.Second

func (w *Worker) setVisibility(ctx context.Context, m *Message, d time.Duration) bool {
	if m.ReceiptHandle == "" {
		return false
	}
	cctx, cancel := context.WithTimeout(ctx, sqsCallTimeout)
	defer cancel()
	secs := int32(min((d+time.Second-1)/time.Second, maxVisibility/time.Second))
	_, err := w.api.ChangeMessageVisibility(cctx, &awssqs.ChangeMessageVisibilityInput{
		QueueUrl:          aws.String(w.opt.QueueURL),
		ReceiptHandle:     aws.String(m.ReceiptHandle),
		VisibilityTimeout: secs,
	})
	if err != nil {
		w.stats.errors.Add(1)
		w.log.Warn("consumer/sqs: could not change message visibility", "queue", w.opt.QueueURL,
			"message_id", m.MessageID, "err", err)
		return false
	}
	return true
}

// delete deletes a handled message, retrying briefly: a message that cannot be deleted is
// redelivered, and the idempotent handler then finds it a duplicate.
func (w *Worker) delete(ctx context.Context, m *Message) {
	backoff := 50 * time.Millisecond
	for attempt := 1; ; attempt++ {
		cctx, cancel := context.WithTimeout(ctx, sqsCallTimeout)
		_, err := w.api.DeleteMessage(cctx, &awssqs.DeleteMessageInput{
			QueueUrl:      aws.String(w.opt.QueueURL),
			ReceiptHandle: aws.String(m.ReceiptHandle),
		})
		cancel()
		if err == nil {
			w.stats.deleted.Add(1)
			return
		}
		w.stats.errors.Add(1)
		_, invalid := errors.AsType[*types.ReceiptHandleIsInvalid](err)
		if invalid || attempt == 3 {
			w.log.Warn("consumer/sqs: could not delete handled message; it will be redelivered and found a duplicate",
				"queue", w.opt.QueueURL, "message_id", m.MessageID, "err", err)
			return
		}
		if !sleep(ctx, backoff) {
			return
		}
		backoff *= 2
	}
}

// sleep waits d or until ctx is done; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

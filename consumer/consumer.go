package consumer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/idemkit/idem"
)

// Message is one delivery of a message, as a broker adapter hands it to a Consumer.
//
// None of the transport's ids is a business key: a producer that retries a publish, an SNS
// topic that fans out to two queues, a dead-letter redrive all deliver the same business event
// under new transport ids. The key comes from the business fact in Body (see KeyFunc).
type Message struct {
	// Body is the payload.
	Body []byte
	// Header holds the message's headers or attributes (NATS headers, AMQP headers, SQS
	// message attributes), as the adapter maps them. Nil when there are none.
	Header map[string][]string
	// ID is the transport's message id (JetStream stream sequence, AMQP message-id or delivery
	// tag, SQS MessageId). It is for logs only: it is never the idempotency key.
	ID string
	// Subject is where the message came from: the NATS subject, the AMQP routing key, the
	// queue name. Informational: Handle stores it as the record's route (idem.Record.Route,
	// shown by `idem list` and the operator console).
	Subject string
	// Redelivered reports that the broker has delivered this message before (when the broker
	// says so). Informational: a first delivery can be a duplicate too.
	Redelivered bool

	// Extend, when the adapter sets it, tells the broker that the message is still being
	// worked on, so that it is not handed to another consumer meanwhile (JetStream
	// InProgress, SQS ChangeMessageVisibility). Consumer.Handle calls it every ExtendEvery
	// while the key is claimed and the handler runs. An error is logged and the effect goes
	// on: the store's claim still keeps a redelivered copy from running it (it gets OutcomeInFlight).
	Extend func(ctx context.Context) error
	// ExtendEvery is how often Extend is called; zero or negative: never. Adapters set it to a
	// fraction of the broker's redelivery timeout (AckWait, visibility timeout).
	ExtendEvery time.Duration
}

// KeyFunc derives the idempotency key of a message from the business fact it carries: the
// order id, the transaction id, the producer's own idempotency key, the period of a scheduled
// job. It must return the same key for every delivery of the same event and different keys for
// different events. It must never use the transport's message id (SNS fan-out gives each copy
// its own). An error means the message can never be handled: the result is OutcomeRejected.
type KeyFunc func(m *Message) (string, error)

// Handler performs the effect of a message. ctx is cancelled when the Handle call's context
// is, or with cause idem.ErrLeaseLost if the claim was taken over. It returns a small result to
// store and hand to later duplicates (nil for none), or an error:
//   - any error: the claim is released and the message redelivered (OutcomeFailed);
//   - an error wrapped with idem.Uncertain: the effect may have happened; the claim is held as
//     the engine's UncertainPolicy says and the message is not acked (OutcomeFailed);
//   - an error wrapped with Reject: the message can never succeed; the claim is released and
//     the message dead-lettered (OutcomeRejected).
type Handler func(ctx context.Context, m *Message) ([]byte, error)

// Options configure a Consumer. Only Key is required.
type Options struct {
	// Runner runs the handler once per key: an *idem.Engine, or a transactional runner such
	// as pgstore.NewTxRunner (see Runner). Required.
	Runner Runner
	// Key derives the idempotency key from the message's business fact. Required.
	Key KeyFunc
	// Fingerprint identifies the content of the message, so that a key reused for a
	// different event is noticed (OutcomeRejected, matching idem.ErrMismatch) instead of skipped as a
	// duplicate. It must return 64 lowercase hex digits (see idem.Fingerprint). Default: the
	// idem.Fingerprint of Body. Set it when the body holds fields that change between
	// deliveries of one event (a send timestamp), for example to the fingerprint of the
	// business fields only.
	Fingerprint func(m *Message) (string, error)
	// Scope is joined to every key as idem.ScopedKey(Scope, key) ("billing|order-42"), so that
	// two consumers that both handle an event (billing and shipping, each on its own queue fed
	// by one topic) each run their effect once while sharing a store. The join is unambiguous:
	// a scope is at most idem.MaxScopeLen bytes of UTF-8 without idem.ScopeSeparator or a
	// control character (idem.CheckScope), so two (Scope, key) pairs never share a record,
	// whatever the keys hold. Default "": the empty scope, shared by every consumer without one
	// (and by the HTTP faces' anonymous callers); give each consumer of a shared store its own.
	Scope string
	// MaxResult is the largest handler result, in bytes, that is stored and returned to
	// duplicates. A larger result is not stored; duplicates get Result.OutputOmitted. Default
	// 64 KiB; negative stores no result at all.
	MaxResult int
	// RetryDelay is the delay adapters put on the redelivery of a OutcomeFailed message, when the
	// broker can delay it. Default 0: redeliver as soon as the broker does.
	RetryDelay time.Duration
	// InFlightDelay caps the delay before an OutcomeInFlight message comes back: its Result.RetryAfter
	// is the holder's remaining lease, at most InFlightDelay. Default 2s: the holder usually
	// finishes within it and the redelivery is then a cheap duplicate; a crashed holder's
	// lease is taken over once it runs out.
	InFlightDelay time.Duration
	// OnEvent, when set, is called once per message as Handle returns, with its Event (the
	// Result, its Outcome included), for metrics and logs. It must be quick and safe for
	// concurrent use. Default nil.
	OnEvent func(Event)
	// Trace, when set, is called as Handle begins, with the adapter's context and the
	// message. Handle runs under the context it returns, so the engine's observer (its claim,
	// effect and completion spans) and the handler see it, and calls the returned func, when
	// not nil, with the Event OnEvent gets (Outcome OutcomeFailed if the handler panics). It is
	// how a tracer continues the producer's trace from the message's headers: see
	// idemotel.ConsumerTrace. It must be quick and safe for concurrent use. Default nil.
	Trace func(ctx context.Context, m *Message) (context.Context, func(Event))
	// Logger receives warnings (an effect whose record could not be stored, a failed broker
	// extension). Default slog.Default().
	Logger *slog.Logger
}

// Runner runs an effect at most once per key: an *idem.Engine, which claims the key, runs the
// effect and completes the record each on its own, or a transactional runner
// (pgstore.NewTxRunner, mysqlstore.NewTxRunner, sqlitestore.NewTxRunner), which runs the claim,
// the handler's writes and the completion in one database transaction. The handler of a
// transactional runner takes that transaction from its context with the store's TxFromContext
// and writes through it; the message is acked only once the transaction has committed.
//
// Handle reads one thing from Do beyond its errors: Result.Executed. When the handler
// succeeded and Do still returned an error, Executed true means the effect stands and its
// record could not be stored (the engine: the message is acked, as redelivering it could only
// run the effect twice), Executed false that nothing of it stands (a transaction whose commit
// failed: the message is not acked, and its redelivery replays or runs the effect once).
type Runner = idem.Runner

// Consumer makes the effect of each business event happen once, however many times the broker
// delivers it. It is broker-neutral: adapters (consumer/natsjs, consumer/amqp, consumer/sqs)
// turn deliveries into Messages, call Handle and ack or not as the Result says. It is safe for
// concurrent use. Create it with New: the zero value has no runner, and Handle panics on it.
type Consumer struct {
	engine Runner
	h      Handler
	opt    Options
	log    *slog.Logger
}

// New returns a Consumer that runs h once per key through opt.Runner: an *idem.Engine, or a
// transactional runner such as pgstore.NewTxRunner (see Runner). It fails with an
// *idem.OptionError (matching idem.ErrInvalidInput) naming the field when an argument or
// option is invalid.
func New(opt Options, h Handler) (*Consumer, error) {
	engine := opt.Runner
	switch {
	case engine == nil || engine == (*idem.Engine)(nil):
		return nil, optionError("Options.Runner", "is required")
	case h == nil:
		return nil, optionError("handler", "is nil")
	case opt.Key == nil:
		return nil, optionError("Options.Key", "is required")
	case opt.RetryDelay < 0:
		return nil, optionError("Options.RetryDelay", "%s is negative", opt.RetryDelay)
	case opt.InFlightDelay < 0:
		return nil, optionError("Options.InFlightDelay", "%s is negative", opt.InFlightDelay)
	}
	if err := idem.CheckScope(opt.Scope); err != nil {
		return nil, optionError("Options.Scope", "%q: %v", opt.Scope, err)
	}
	opt.MaxResult = cmp.Or(opt.MaxResult, 64<<10)
	opt.InFlightDelay = cmp.Or(opt.InFlightDelay, 2*time.Second)
	return &Consumer{engine: engine, h: h, opt: opt, log: cmp.Or(opt.Logger, slog.Default())}, nil
}

// optionError reports an invalid option as an *idem.OptionError raised by consumer.
func optionError(field, format string, args ...any) error {
	return &idem.OptionError{Package: "consumer", Field: field, Problem: fmt.Sprintf(format, args...)}
}

// Options returns the consumer's options with defaults filled in.
func (c *Consumer) Options() Options { return c.opt }

// Handle derives the message's key and runs the handler once for it through the engine. With
// an *idem.Engine it costs one store round trip for a duplicate (the claim attempt finds the
// completed record) and two for a new event (claim, then completion), plus one per engine
// heartbeat while a long effect runs; a transactional runner adds its claim and completion to
// the handler's own transaction. It never panics on bad input; a panicking handler releases the claim and the
// panic goes on.
//
// The Result says what happened and what the adapter does with the delivery; see Outcome.
func (c *Consumer) Handle(ctx context.Context, m *Message) (r Result) {
	if c == nil || c.engine == nil {
		panic("consumer: Handle on a Consumer not created with New: create it with New")
	}
	start := time.Now()
	if c.opt.Trace != nil && m != nil {
		var done func(Event)
		if ctx, done = c.opt.Trace(ctx, m); done != nil {
			r = Result{Outcome: OutcomeFailed, Err: errPanicked} // what done gets if the handler panics
			defer func() { done(Event{Message: m, Result: r, Duration: time.Since(start)}) }()
		}
	}
	r = c.handle(ctx, m)
	if c.opt.OnEvent != nil {
		c.opt.OnEvent(Event{Message: m, Result: r, Duration: time.Since(start)})
	}
	return r
}

func (c *Consumer) handle(ctx context.Context, m *Message) Result {
	if m == nil {
		return Result{Outcome: OutcomeRejected, Err: fmt.Errorf("%w: consumer: nil message", idem.ErrInvalidInput)}
	}
	key, err := c.opt.Key(m)
	if err != nil {
		return Result{Outcome: OutcomeRejected, Err: fmt.Errorf("consumer: key: %w", err)}
	}
	if key == "" {
		return Result{Outcome: OutcomeRejected, Err: fmt.Errorf("%w: consumer: key function returned an empty key", idem.ErrInvalidInput)}
	}
	key = idem.ScopedKey(c.opt.Scope, key)
	var fp string
	if c.opt.Fingerprint != nil {
		if fp, err = c.opt.Fingerprint(m); err != nil {
			return Result{Outcome: OutcomeRejected, Key: key, Err: fmt.Errorf("consumer: fingerprint: %w", err)}
		}
	} else {
		fp = idem.Fingerprint(m.Body)
	}

	stop := c.extend(ctx, m)
	var out []byte
	succeeded := false
	// The record names where its message came from, for operators (idem list, the console).
	res, err := c.engine.Run(ctx, idem.Call{Key: key, Fingerprint: fp, Route: m.Subject}, func(ctx context.Context) (idem.Response, error) {
		b, err := c.h(ctx, m)
		if err != nil {
			return idem.Response{}, err
		}
		out, succeeded = b, true
		switch {
		case c.opt.MaxResult < 0:
			return idem.Response{}, nil
		case len(b) > c.opt.MaxResult:
			return idem.Response{BodyOmitted: true}, nil
		}
		return idem.Response{Body: b}, nil
	})
	stop()

	r := Result{Key: key, Takeover: res.Takeover}
	var inflight *idem.InFlightError
	switch {
	case err == nil && res.Replayed:
		r.Outcome, r.Output, r.OutputOmitted = OutcomeReplay, res.Response.Body, res.Response.BodyOmitted
	case err == nil:
		r.Outcome, r.Output, r.OutputOmitted = OutcomeExecuted, out, res.Response.BodyOmitted
	case succeeded && res.Executed:
		// The effect ran and succeeded, but its record could not be completed (the store
		// failed, or the claim was taken over). The delivery is acked anyway: redelivering it
		// is the one way to run the effect twice. (A transactional runner whose commit failed
		// reports Executed false: its effect rolled back with the claim, and the message must
		// come back.)
		c.log.Warn("consumer: effect done but not recorded; acking the message", "key", key, "err", err)
		r.Outcome, r.Output, r.Err = OutcomeExecuted, out, err
	case errors.As(err, &inflight):
		r.Outcome, r.Err = OutcomeInFlight, err
		r.RetryAfter = min(inflight.RetryAfter, c.opt.InFlightDelay)
	case errors.Is(err, ErrRejected), errors.Is(err, idem.ErrMismatch), errors.Is(err, idem.ErrInvalidInput):
		r.Outcome, r.Err = OutcomeRejected, err
	default:
		r.Outcome, r.Err, r.RetryAfter = OutcomeFailed, err, c.opt.RetryDelay
	}
	return r
}

// errPanicked is the error of the Result given to a Trace func when the handler panicked.
var errPanicked = errors.New("consumer: handler panicked")

// extend calls m.Extend every m.ExtendEvery until the returned func is called; that func
// waits for an extension under way.
func (c *Consumer) extend(ctx context.Context, m *Message) (stop func()) {
	if m.Extend == nil || m.ExtendEvery <= 0 {
		return func() {}
	}
	var (
		mu      sync.Mutex
		stopped bool
		t       *time.Timer
	)
	fire := func() {
		mu.Lock()
		defer mu.Unlock()
		if stopped || ctx.Err() != nil {
			return
		}
		ectx, cancel := context.WithTimeout(ctx, m.ExtendEvery)
		err := m.Extend(ectx)
		cancel()
		if err != nil {
			c.log.Warn("consumer: broker-side extension failed", "message", m.ID, "err", err)
		}
		t.Reset(m.ExtendEvery)
	}
	mu.Lock()
	t = time.AfterFunc(m.ExtendEvery, fire)
	mu.Unlock()
	return func() {
		mu.Lock()
		stopped = true
		t.Stop()
		mu.Unlock()
	}
}

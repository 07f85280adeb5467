package outbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/idemkit/idem"
)

// RelayOptions configure a Relay. The zero value is a good default for every field.
type RelayOptions struct {
	// Batch is how many events one round claims. Default 100.
	Batch int
	// Interval is the pause between rounds that found nothing to publish. Default 200ms.
	Interval time.Duration
	// Lease is how long a claimed event is this relay's before another relay may take it
	// (if this one stopped). It must exceed the time a round's publishes take. Default 30s.
	Lease time.Duration
	// MinBackoff is the first pause before a failed event is published again; it doubles on
	// each failure, with jitter, up to MaxBackoff. Defaults 100ms and 1m.
	MinBackoff, MaxBackoff time.Duration
	// PublishTimeout bounds one publish. Default 10s.
	PublishTimeout time.Duration
	// OnEvent, if set, is called after each publish attempt with what became of it, for
	// metrics and logs. It runs on the relay's goroutine: keep it short.
	OnEvent func(Event)
	// Logger receives failed publishes and store errors. Default slog.Default().
	Logger *slog.Logger
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

func (o RelayOptions) withDefaults() (RelayOptions, error) {
	o.Batch = cmp.Or(o.Batch, 100)
	o.Interval = cmp.Or(o.Interval, 200*time.Millisecond)
	o.Lease = cmp.Or(o.Lease, 30*time.Second)
	o.MinBackoff = cmp.Or(o.MinBackoff, 100*time.Millisecond)
	o.MaxBackoff = cmp.Or(o.MaxBackoff, time.Minute)
	o.PublishTimeout = cmp.Or(o.PublishTimeout, 10*time.Second)
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	for _, c := range []struct {
		name string
		bad  bool
	}{
		{"Batch", o.Batch < 1},
		{"Interval", o.Interval < 0},
		{"Lease", o.Lease <= 0},
		{"MinBackoff", o.MinBackoff <= 0},
		{"MaxBackoff", o.MaxBackoff < o.MinBackoff},
		{"PublishTimeout", o.PublishTimeout <= 0 || o.PublishTimeout >= o.Lease},
	} {
		if c.bad {
			return o, &idem.OptionError{Package: "outbox", Field: "RelayOptions." + c.name, Problem: "is out of range (Batch at least 1, Lease above PublishTimeout, MaxBackoff at least MinBackoff)"}
		}
	}
	return o, nil
}

// Outcome is what became of one publish attempt: a short, stable, lowercase label, fit for
// metrics, as the other faces' outcomes are.
type Outcome string

const (
	// OutcomePublished: the broker accepted the event; the relay marks it sent.
	OutcomePublished Outcome = "published"
	// OutcomeFailed: the publish failed; the event is due again at Event.RetryAt (later
	// events of its order key wait for it).
	OutcomeFailed Outcome = "failed"
)

// Event describes one publish attempt of a Relay: passed to RelayOptions.OnEvent.
type Event struct {
	// Message is the event; Message.Attempts counts this attempt.
	Message Message
	// Outcome says whether the broker accepted it.
	Outcome Outcome
	// Err is the publish's error (OutcomeFailed), nil otherwise.
	Err error
	// Duration is the time the publish took.
	Duration time.Duration
	// RetryAt is when a failed event is due again (OutcomeFailed); zero otherwise.
	RetryAt time.Time
}

// Relay publishes the events of an outbox table, at least once each, in order per order key
// (Message.OrderKey).
// Create it with NewRelay; it is safe to run several relays, in one process or many, on one
// table.
type Relay struct {
	st  Store
	pub Publisher
	opt RelayOptions
}

// NewRelay returns a relay that publishes st's events with pub.
func NewRelay(st Store, pub Publisher, opt RelayOptions) (*Relay, error) {
	switch {
	case st == nil:
		return nil, &idem.OptionError{Package: "outbox", Field: "st", Problem: "is nil: NewRelay needs a Store"}
	case pub == nil:
		return nil, &idem.OptionError{Package: "outbox", Field: "pub", Problem: "is nil: NewRelay needs a Publisher"}
	}
	opt, err := opt.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Relay{st: st, pub: pub, opt: opt}, nil
}

// Run publishes events until ctx ends, then returns ctx's error. Store errors are logged and
// the round is tried again after Interval.
func (r *Relay) Run(ctx context.Context) error {
	for {
		n, err := r.Round(ctx)
		if err != nil && ctx.Err() == nil {
			r.opt.Logger.Warn("outbox: round failed; trying again", "err", err)
		}
		if n == r.opt.Batch && err == nil {
			continue // more may be waiting
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(r.opt.Interval):
		}
	}
}

// Round claims one batch of due events and publishes each, oldest first: a published event
// is marked sent (and swept after the store's retention), a failed one is due again after its backoff. It returns how many events it
// claimed. Later events of an order key whose event failed in this round are not in it:
// Claim hands out only the oldest unsent event of each order key.
func (r *Relay) Round(ctx context.Context) (int, error) {
	batch, err := r.st.Claim(ctx, r.opt.Now(), r.opt.Batch, r.opt.Lease)
	if err != nil {
		return 0, fmt.Errorf("outbox: claim: %w", err)
	}
	var errs []error
	for _, m := range batch {
		if ctx.Err() != nil {
			// Unpublished events of this batch stay claimed until the lease ends; another
			// relay (or this one, later) publishes them then.
			return len(batch), ctx.Err()
		}
		began := r.opt.Now()
		pctx, cancel := context.WithTimeout(ctx, r.opt.PublishTimeout)
		perr := r.pub.Publish(pctx, m)
		cancel()
		took := r.opt.Now().Sub(began)
		if perr == nil {
			if r.opt.OnEvent != nil {
				r.opt.OnEvent(Event{Message: m, Outcome: OutcomePublished, Duration: took})
			}
			// Published: a failure to mark it only means it is published again later.
			if err := r.st.Sent(context.WithoutCancel(ctx), m); err != nil {
				errs = append(errs, fmt.Errorf("outbox: mark %d sent: %w", m.ID, err))
			}
			continue
		}
		at := r.opt.Now().Add(r.backoff(m.Attempts, perr))
		if r.opt.OnEvent != nil {
			r.opt.OnEvent(Event{Message: m, Outcome: OutcomeFailed, Err: perr, Duration: took, RetryAt: at})
		}
		r.opt.Logger.Warn("outbox: publish failed; will try again", "id", m.ID, "key", m.Key, "topic", m.Topic, "attempts", m.Attempts, "err", perr, "retry_at", at)
		if err := r.st.Retry(context.WithoutCancel(ctx), m, at, perr.Error()); err != nil {
			errs = append(errs, fmt.Errorf("outbox: reschedule %d: %w", m.ID, err))
		}
	}
	return len(batch), errors.Join(errs...)
}

// backoff is the pause before the attempts+1-th publish: MinBackoff doubled per failed
// attempt, up to MaxBackoff, with up to a quarter of jitter; MaxBackoff for a permanent error.
func (r *Relay) backoff(attempts int, err error) time.Duration {
	if IsPermanent(err) {
		return r.opt.MaxBackoff
	}
	d := r.opt.MinBackoff
	for i := 1; i < attempts && d < r.opt.MaxBackoff; i++ {
		d *= 2
	}
	d = min(d, r.opt.MaxBackoff)
	return d - time.Duration(rand.Int64N(int64(d/4)+1))
}

// Lag is the age of the oldest unsent event, 0 when none: the relay's delay, to export as a
// gauge and alert on.
func (r *Relay) Lag(ctx context.Context) (time.Duration, error) { return r.st.Lag(ctx) }

package idemotel

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// AttrOutbox names the outbox (its table) on the idem.outbox.lag gauge.
const AttrOutbox = attribute.Key("idem.outbox")

// Lagger is what OutboxLag reads: an *outbox.Relay, or any outbox.Store.
type Lagger interface {
	Lag(ctx context.Context) (time.Duration, error)
}

// OutboxLag registers the gauge idem.outbox.lag (seconds): the age of the oldest event of an
// outbox table that no relay has published yet, 0 when none, read from l each time the metrics
// are collected, with the attribute idem.outbox set to name (the table's name, say). Alert when
// it grows: a broker that refuses events, a relay that is down. A collection whose read fails
// reports no value. Unregister the returned registration to stop reading l.
func OutboxLag(l Lagger, name string, opt Options) (metric.Registration, error) {
	if l == nil {
		return nil, fmt.Errorf("idemotel: OutboxLag: nil Lagger")
	}
	m := opt.meter()
	g, err := m.Float64ObservableGauge("idem.outbox.lag", metric.WithUnit("s"),
		metric.WithDescription("Age of the oldest outbox event not yet published, 0 when none."))
	if err != nil {
		return nil, fmt.Errorf("idemotel: %w", err)
	}
	attrs := metric.WithAttributeSet(attribute.NewSet(AttrOutbox.String(name)))
	reg, err := m.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		lag, err := l.Lag(ctx)
		if err != nil {
			return fmt.Errorf("idemotel: outbox %s: lag: %w", name, err)
		}
		o.ObserveFloat64(g, lag.Seconds(), attrs)
		return nil
	}, g)
	if err != nil {
		return nil, fmt.Errorf("idemotel: %w", err)
	}
	return reg, nil
}

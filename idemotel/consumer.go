package idemotel

import (
	"context"
	"net/textproto"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/consumer"
)

// Attribute keys of the consumer's span (OpenTelemetry's messaging conventions).
const (
	// AttrMessagingDestination is where the message came from: consumer.Message.Subject (the
	// NATS subject, the AMQP routing key, the queue's name or an SNS topic's ARN).
	AttrMessagingDestination = attribute.Key("messaging.destination.name")
	// AttrMessagingMessageID is the transport's message id, consumer.Message.ID.
	AttrMessagingMessageID = attribute.Key("messaging.message.id")
)

// ConsumerTrace returns a consumer.Options.Trace func that continues, for each message, the
// trace of the producer that sent it: it extracts the trace context from the message's
// headers (W3C traceparent and tracestate, with Options.Propagator or the propagator set up
// by the application) and handles the message under a consumer span, "idem.consume", a child
// of the producer's span. The engine's spans for the message (idem.claim or idem.replay,
// idem.effect, idem.complete) and the handler's own spans are its children:
//
//	c, err := consumer.New(consumer.Options{
//		Runner: eng,
//		Key:   orderID,
//		Trace: idemotel.ConsumerTrace(o),
//	}, charge)
//
// Header names are matched without regard to case, so a traceparent set by any producer is
// found whatever the broker's client did to its case (NATS headers, AMQP headers, SQS message
// attributes and those of an SNS envelope, Kafka record headers and Redis stream fields, as
// the adapters put them in consumer.Message.Header). A message without trace context gets a
// span of its own, under ctx's span if any.
//
// The span carries messaging.destination.name (Message.Subject), messaging.message.id
// (Message.ID), idem.key (Options.Key of the Result's key; see ConsumerKey) and idem.outcome
// (executed, replay, in_flight, failed or rejected); failed and rejected set the span's
// status to Error with the outcome as its description. It never carries the message's body,
// its other headers or an error message.
func ConsumerTrace(opt Options) func(context.Context, *consumer.Message) (context.Context, func(consumer.Event)) {
	tracer, prop := opt.tracer(), opt.propagator()
	key := opt.Key
	if key == nil {
		key = ClientKey
	}
	return func(ctx context.Context, m *consumer.Message) (context.Context, func(consumer.Event)) {
		if len(m.Header) > 0 {
			ctx = prop.Extract(ctx, headerCarrier(m.Header))
		}
		ctx, span := tracer.Start(ctx, "idem.consume", trace.WithSpanKind(trace.SpanKindConsumer))
		if !span.IsRecording() {
			return ctx, nil // ending it would do nothing
		}
		if m.Subject != "" {
			span.SetAttributes(AttrMessagingDestination.String(m.Subject))
		}
		if m.ID != "" {
			span.SetAttributes(AttrMessagingMessageID.String(m.ID))
		}
		return ctx, func(r consumer.Event) {
			if k := key(r.Key); k != "" && r.Key != "" {
				span.SetAttributes(AttrKey.String(k))
			}
			span.SetAttributes(AttrOutcome.String(r.Outcome.String()))
			if r.Outcome == consumer.OutcomeFailed || r.Outcome == consumer.OutcomeRejected {
				span.SetStatus(codes.Error, r.Outcome.String())
			}
			span.End()
		}
	}
}

// ConsumerKey returns an Options.Key func for the spans of a consumer made with
// consumer.Options.Scope set to scope: it drops the scope and its separator from the front of
// the key (idem.ScopedKey), and then, like ClientKey, any tenant's scope. With it a consumer's
// idem.key is the key its KeyFunc returned, without a tenant's scope in front.
func ConsumerKey(scope string) func(storageKey string) string {
	prefix := idem.ScopedKey(scope, "")
	return func(storageKey string) string {
		return ClientKey(strings.TrimPrefix(storageKey, prefix))
	}
}

// TraceHeaders returns the trace context of ctx's span as message headers (traceparent, and
// tracestate and baggage when there are any, with Options.Propagator or the propagator set up
// by the application), for a producer to put on the message it publishes, so that a consumer
// with ConsumerTrace continues its trace: into a NATS message's Header, an AMQP Publishing's
// Headers, SQS or SNS message attributes of type String, Kafka record headers. It returns an
// empty map when ctx has no span to continue.
func TraceHeaders(ctx context.Context, opt Options) map[string]string {
	c := propagation.MapCarrier{}
	opt.propagator().Inject(ctx, c)
	return c
}

// headerCarrier reads a consumer.Message's Header for a propagator, matching names without
// regard to case.
type headerCarrier map[string][]string

func (h headerCarrier) Get(key string) string {
	if v, ok := h[key]; ok && len(v) > 0 {
		return v[0]
	}
	if v, ok := h[textproto.CanonicalMIMEHeaderKey(key)]; ok && len(v) > 0 {
		return v[0]
	}
	for k, v := range h {
		if len(v) > 0 && strings.EqualFold(k, key) {
			return v[0]
		}
	}
	return ""
}

// Set is not used: a consumer's message is only read.
func (h headerCarrier) Set(key, value string) { h[key] = []string{value} }

func (h headerCarrier) Keys() []string {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	return keys
}

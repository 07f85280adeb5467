// Package idemotel traces and measures idem with OpenTelemetry: the engine's stages, the
// retrying client's intents and attempts, and the continuation of a caller's trace through
// the HTTP middleware.
//
// # The engine
//
// Observer returns an idem.Observer; set it as idem.Options.Observer. Each call to
// Engine.Do then makes spans under the caller's context:
//
//   - idem.claim: the reservation (or a hit in the local cache), with idem.outcome new,
//     in_flight, mismatch, store_error or canceled; renamed idem.replay when the stored
//     response is returned. A claim that took over from a holder whose lease had expired has
//     idem.takeover=true and an idem.takeover event. A new claim carries idem.attempt and
//     idem.lease_ms.
//   - idem.wait, inside the claim: a duplicate waiting for the holder (idem.Options.Wait).
//   - idem.effect: the effect and the recording of its result, with idem.outcome kept,
//     released, uncertain, lease_lost, store_error or panic. The effect runs under this span,
//     so its own spans (a database call, an outgoing request) are its children.
//   - idem.complete and idem.release, inside the effect: the store calls, outcome ok,
//     lease_lost or store_error.
//
// Spans carry idem.key, the client's key, and idem.store, Options.Store. They never carry the
// tenant's scope (the part of the storage key before idem.ScopeSeparator, see ClientKey),
// a request or response body, or an error message (which may quote the storage key): an
// error shows as the span's status with the outcome as its description.
//
// Metrics: idem.outcomes (a counter by idem.stage and idem.outcome), idem.store.duration (a
// histogram in seconds of claim, complete and release, by stage and outcome; a claim's
// includes any wait), idem.cache.hits, idem.takeovers, idem.uncertain (counters) and
// idem.claims.in_flight (an up-down counter of effects running now), all with idem.store.
//
// OutboxLag adds the gauge idem.outbox.lag (seconds, with idem.outbox): the age of the oldest
// event of an outbox table not yet published, read from its relay at each collection.
//
// # The client
//
// Transport wraps the RoundTripper that sends each attempt: one client span per attempt,
// idem.attempt, and the trace context injected into its headers (W3C traceparent with the
// propagator set up by the application, or Options.Propagator). Intent wraps the retrying
// idemclient.Transport: one span per logical request, idem.intent, the parent of its
// attempts, with the key and the number of attempts.
//
// # The server
//
// Handler, outside the idemhttp middleware, extracts the caller's trace context and runs the
// request under a server span that follows OpenTelemetry's HTTP semantic conventions (named
// "POST /v1/orders/{id}" once the router has called Route, with http.route,
// http.response.status_code, server.address, url.path, an error status on a 5xx), so that
// the engine's spans and the handler's continue the caller's trace; with a meter provider it
// records http.server.request.duration. An application that already wraps its handlers with
// otelhttp.NewHandler gets the same from it: put otelhttp outside the middleware and leave
// Handler out.
//
// ClientTransport does the same for outgoing calls: a client span per request, its context
// injected into the request (replacing a forwarded caller's traceparent), and
// http.client.request.duration. A proxy that forwards requests through it, as idem's gateway
// does, makes client → proxy → upstream one trace.
//
// Every duration histogram has explicit bounds in seconds: HTTPDurationBounds for the HTTP
// durations, StoreDurationBounds for idem.store.duration.
//
// # Consumers
//
// ConsumerTrace, set as consumer.Options.Trace, continues in the consumer the trace of the
// producer that published the message: it reads the W3C traceparent from the message's
// headers (NATS headers, AMQP headers, SQS message attributes, an SNS envelope's attributes,
// Kafka record headers, Redis stream fields, as the adapters put them in consumer.Message.Header)
// and handles the message under a consumer span, "idem.consume", a child of the producer's
// span, with the engine's spans and the handler's under it. The producer puts the headers on
// the message with TraceHeaders (or with its propagator and the broker client's own carrier).
// A consumer's keys carry its scope in front ("billing|order-42"): ConsumerKey keeps it off
// the spans.
//
// # Cost
//
// Without an observer the engine pays one nil check per stage. With one, each Do makes two
// to four spans and a few metric updates; see docs/bench/otel.md in the repository for
// figures.
package idemotel

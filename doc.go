// Package idem makes retried and duplicated operations safe: doing the same thing twice has
// exactly the effect of doing it once.
//
// An HTTP request retried after a lost response, a queue message delivered twice, a payment
// button pressed twice: each is given a key, and the [Engine] runs the effect for a key at most
// once, stores its response and replays that response to every duplicate.
//
// # The engine
//
// [Engine.Do] claims the key in the [Store] with one atomic operation, runs the effect, then
// either keeps its response (completion) or releases the claim so that a retry executes, as the
// [Policy] decides. Duplicates get the stored response (Result.Replayed), or [ErrInFlight] while
// the first is still running (or they wait for it, with Options.Wait), or [ErrMismatch] when the
// same key comes with a different request [Fingerprint].
//
//	eng, err := idem.New(store, idem.Options{})
//	res, err := eng.Do(ctx, "tenant-42/order-1001", idem.Fingerprint(body), func(ctx context.Context) (idem.Response, error) {
//		return chargeCard(ctx, body)
//	})
//
// # Guarantees
//
//   - Once: for a key, the effect runs at most once while its record lives, however many
//     duplicates arrive at once from however many processes share the store. The exception is a
//     holder that died: after its lease runs out another may take over, and the old holder is
//     fenced (its Complete fails with [ErrLeaseLost]).
//   - Atomic claim: check and record are one store operation.
//   - Faithful replay: a duplicate gets the first response, byte for byte.
//   - No silent mismatch: the same key with another fingerprint gets [ErrMismatch].
//   - Expired is absent: a record past its expiry counts as absent, whatever the store still holds.
//   - Failure never looks like success: an error or panic releases the claim; an uncertain
//     outcome ([Uncertain]) is held, never silently executed again. An effect that may have
//     begun (an HTTP handler that began to answer) reports a later failure as uncertain.
//   - Fail closed: if the store cannot be reached no effect runs ([ErrStoreUnavailable]).
//
// # Stores
//
// Backends live in their own packages under store/: memstore (one process), sqlitestore (the
// embedded default), pgstore, mysqlstore, redisstore and dynamostore. Each passes the one
// conformance suite, store/storetest. This package imports only the standard library.
//
// # Errors
//
// Every error can be matched with errors.Is: [ErrInFlight] (an [*InFlightError] says how long to
// wait), [ErrMismatch], [ErrLeaseLost], [ErrStoreUnavailable] (a [*StoreError] carries the
// store's own error), [ErrUncertain] and [ErrInvalidInput].
//
// # Observing
//
// [Options].Observer is told when each stage of [Engine.Do] begins and ends — the claim, a
// duplicate's wait, the effect, the store calls that complete or release it — with the
// outcome, whether the claim was a takeover, its attempt count and lease ([Event]). Package
// idemotel turns it into OpenTelemetry spans and metrics. Unset, it costs a nil check per
// stage.
//
// The faces built on the engine follow one rule, so there is one shape to learn: each reports
// what became of every request, call, message or invocation through the OnEvent func(Event)
// field of its options (idemhttp, idemgrpc, consumer, idemlambda, idemfiber; the sweeper and
// idemclient report their batches and attempts the same way), and the Event says it in an
// Outcome field: typed constants named after their word (OutcomeReplay is "replay"), short
// lowercase labels fit for metrics, one word for one meaning on every face (executed,
// replay, in_flight, mismatch, released, uncertain, store_error, …). Spans come from the
// engine's Observer, which every face reaches through the runner it is given.
package idem

// Package idemlambda makes an AWS Lambda handler idempotent: an event whose key was seen before
// gets the stored result instead of a second run of the handler.
//
//	eng, _ := idem.New(store, idem.Options{Wait: 10 * time.Second})
//	h, _ := idemlambda.Wrap(idemlambda.Options{Engine: eng, KeyPath: "body.order_id", FingerprintPath: "body"}, chargeOrder)
//	lambda.Start(h)
//
// Lambda delivers an event more than once: asynchronous invocations are retried on error and
// may be delivered twice without one, event source mappings deliver at least once, and a
// client of a synchronous API retries after a timeout. Wrap keys each event on the business
// fact it carries, found at a path into the event's JSON (Options.KeyPath), never on the
// delivery (a request id, a message id that SNS mints per fan-out): the handler runs once per
// key while the record lives, and every duplicate gets its result.
//
// # Keys, fingerprints and names
//
// A path is a dot-separated list of fields ("detail.order_id"); a segment of digits indexes an
// array ("Records.0.body"); a string holding JSON, as the body of an API Gateway request or of
// an SQS message, is decoded when the path goes on into it; "." is the whole event. The value
// found is the key (a string, number or boolean as it is; an object or array hashed), prefixed
// with the function's name (Options.Name, by default AWS_LAMBDA_FUNCTION_NAME) so functions
// sharing a store keep apart, as idem.Wrap does.
//
// By default only the key is compared: a second event with the same key is a duplicate,
// whatever else it carries (as AWS Lambda Powertools does without payload validation). Set
// Options.FingerprintPath to the part of the event that must match ("body", "detail"); an event
// with the key and another value there fails with idem.ErrMismatch, and the handler does not
// run. Objects are compared after decoding, so the order of fields and spacing do not matter.
//
// # Results and errors
//
// The handler's result is stored as JSON (idem.DoJSON) and a duplicate gets it decoded; since
// Lambda sends results as JSON, the caller receives the same bytes. An error from the handler
// releases the key, so Lambda's retry runs the handler again; an error wrapped with
// idem.Uncertain holds it (the effect may have happened). A duplicate that arrives while the
// first event is being handled fails with idem.ErrInFlight, or waits for the result with the
// engine's Options.Wait (recommended: Lambda runs duplicates in parallel). If the store cannot
// be reached the handler does not run and the error matches idem.ErrStoreUnavailable: fail
// closed, and Lambda retries.
//
// A function that times out or crashes mid-event leaves its claim in progress until the
// engine's lease runs out (Options.Lease, 30s by default): duplicates meanwhile get
// idem.ErrInFlight, and the first one after it runs the handler again (at least once, never
// zero). Keep the lease longer than the handler's longest normal run; the engine extends it
// while the handler runs.
//
// For SQS event source mappings with partial batch responses, the consumer/sqs package's
// LambdaHandler handles each record on its own; idemlambda is for handlers that take one event
// as a whole.
package idemlambda

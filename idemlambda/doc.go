// Package idemlambda makes an AWS Lambda handler idempotent: an event whose key was seen before
// gets the stored result instead of a second run of the handler.
//
//	eng, _ := idem.New(store, idem.Options{Wait: 10 * time.Second})
//	h, _ := idemlambda.Wrap(idemlambda.Options{Runner: eng, KeyPath: "body.order_id", FingerprintPath: "body"}, chargeOrder)
//	lambda.Start(h)
//
// Functions behind API Gateway get the Idempotency-Key semantics of idemhttp instead, with
// WrapAPIGateway (REST APIs, payload format 1.0) and WrapHTTPAPI (HTTP APIs and function URLs,
// payload format 2.0):
//
//	h, _ := idemlambda.WrapHTTPAPI(idemlambda.ProxyOptions{Runner: eng}, createOrder)
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
// found is the key, prefixed with the function's name (Options.Name, by default
// AWS_LAMBDA_FUNCTION_NAME) so functions sharing a store keep apart, as idem.Wrap does.
//
// Two events share a key only if they hold the same JSON value there. Types count: the number 5
// and the string "5" are two keys, as are true and "true"; the same number written two ways
// (5, 5.0, 5e0) is one, and objects are compared field by field, in any order. A string is
// stored as it is (unless it starts with '#'); any other value is stored with a tag naming its
// type ("#num:5", "#bool:true", "#json:{...}"), and a key too long for the store as the
// SHA-256 of that ("#sha256:…"), so no string can spell another value's key. A value that
// carries nothing is no key: null, "", {}, [], or an array or object of such values
// ([null, null]). An event without a key runs the handler without protection (with a warning),
// or fails with ErrMissingKey when Options.RequireKey is set.
//
// Options.KeyPaths makes one key of several values, for a fact no single field names (a user
// and an order id that is only unique per user): two events share the key only if every value
// is the same. An event missing any of them has no key: a key made of the values that are there
// would merge the events of everyone missing the same field.
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
// A duplicate in flight and a payload mismatch are errors a handler (or the code that calls
// the function) tells apart with errors.Is: idem.ErrInFlight (an *idem.InFlightError, which
// says when to retry) is what AWS Lambda Powertools raises as IdempotencyAlreadyInProgressError,
// idem.ErrMismatch what it raises as IdempotencyValidationError. Returned from the function,
// either makes Lambda retry an asynchronous invocation; a mismatch never succeeds on retry, so
// send such events to a dead-letter queue or destination.
//
// # Timeouts and the lease
//
// A function that times out or crashes mid-event leaves its claim in progress until its lease
// runs out: duplicates meanwhile get idem.ErrInFlight, and the first one after it runs the
// handler again (at least once, never zero). The lease is the engine's Options.Lease (30s by
// default), extended while the handler runs, but bounded by the invocation: Lambda sets the
// handler context's deadline and stops the function when it passes, so a claim's lease, and
// every extension while the handler runs, is at most
//
//	min(engine lease, deadline + LeaseMargin − now)
//
// Without the bound, the claim of an invocation killed at its timeout would stay in flight for a
// whole engine lease after the function is gone, and a retry in that time would fail for
// nothing (this is what Powertools' in-progress expiry, taken from the Lambda context's
// remaining time, is for). The margin (DefaultLeaseMargin, 500ms) covers the clock error
// between the Lambda service, which sets the deadline, and the instances that run the
// invocation and its retry: Lambda stops the function at its deadline, so nothing of it runs
// later, and a retry sent right after a timeout finds the key free half a second later. A function that
// returns completes or releases its claim, so the bound only matters for invocations that die.
// Keep the engine's Wait shorter than the function's timeout: a duplicate that waits for the
// first one's result waits within its own invocation.
//
// # API Gateway proxy events
//
// WrapAPIGateway and WrapHTTPAPI follow idemhttp (and the IETF draft it implements), on the
// event instead of an http.Request:
//
//   - Only the methods in ProxyOptions.Methods (POST and PATCH by default) are processed; other
//     requests, and requests without an Idempotency-Key header unless ProxyOptions.RequireKey
//     is set, go to the handler untouched.
//   - The key is the Idempotency-Key header, found in any case (HTTP APIs deliver header names
//     in lower case), parsed as idemhttp.ParseKey parses it: a structured-field string or a
//     bare value, 1 to 255 printable ASCII characters, sent once.
//   - The scope keeps callers apart: by default the principal API Gateway's authorizer
//     established (a Cognito user pool's or a JWT authorizer's issuer and subject, the IAM
//     caller or Cognito identity, a Lambda authorizer's principalId — for HTTP APIs, one it put
//     in its context — or, for REST APIs, the API key), or the value of
//     ProxyOptions.ScopeHeader; hashed with SHA-256 and put in
//     front of the key (idemhttp.StorageKey). A request whose caller cannot be identified gets
//     400 unless ProxyOptions.Unscoped is set, so two tenants never share a key.
//   - The fingerprint is the method, the path, the query string (for REST APIs, whose events
//     carry it parsed, the parameters sorted by name) and the body's bytes (a body with
//     isBase64Encoded is decoded first): the same key with another request gets 422 and no
//     effect.
//   - The handler's response is stored whole (status, headers, multi-value headers, cookies,
//     body and its base64 flag, as the event's JSON) and replayed as it was, with
//     Idempotent-Replayed: true. Which responses are kept is the engine's Policy: 5xx, 401,
//     403, 408, 409, 425 and 429 release the key by default, as does an error returned by the
//     handler (returned to Lambda as it is, so API Gateway answers 502).
//   - Refusals are application/problem+json with idemhttp's problem types: 400 for a missing,
//     malformed or repeated key or an unidentified caller, 409 with Retry-After while the
//     first request runs (or, with the engine's Wait, the replay once it is done), 422 on
//     mismatch, and 503 with Retry-After when the store cannot be reached: the handler does not
//     run (fail closed).
//
// The stored response is the JSON of the response event; with dynamostore, one larger than a
// DynamoDB item holds is kept in parts, at the cost of more capacity per write and replay.
//
// # Powertools options and their equivalents
//
// Users of the idempotency utility of AWS Lambda Powertools (Python, TypeScript, Java, .NET)
// find its options here:
//
//	Powertools                       idemlambda
//	event_key_jmespath               Options.KeyPath, a dot path ("body.order_id"; a JSON string on the way is decoded, as
//	                                 powertools_json() does); a multiselect ("[user, order_id]") is Options.KeyPaths.
//	                                 JMESPath filters and functions are not offered: key on the fields that name the
//	                                 business fact, or on a sub-object (compared field by field).
//	                                 For API Gateway, WrapAPIGateway/WrapHTTPAPI take the Idempotency-Key header instead.
//	payload_validation_jmespath      Options.FingerprintPath (same syntax); for proxies, method, path, query and body always.
//	raise_on_no_idempotency_key      Options.RequireKey (ErrMissingKey); ProxyOptions.RequireKey (400). Default off in both.
//	expires_after_seconds            the engine's Options.TTL (default 24h, Powertools' 1h). Expiry is compared by idem on
//	                                 every read, so a record DynamoDB's TTL has not deleted yet is already absent.
//	use_local_cache,                 the engine's Options.CacheSize and CacheBytes: a bounded LRU of completed records only,
//	local_cache_max_items            never of in-progress ones, filled as each result is stored (a duplicate that reaches
//	                                 the same instance costs no store call).
//	POWERTOOLS_IDEMPOTENCY_DISABLED  IDEMLAMBDA_DISABLED=1 (DisabledEnv), for local runs and tests: no store needed, a
//	                                 warning at every cold start, and refused in a deployed function.
//	hash_function (md5)              not offered: keys are stored as they are (tagged by type, SHA-256 when too long), and
//	                                 fingerprints are always SHA-256; a choice of weaker hashes buys nothing.
//	lambda_context /                 automatic: the handler's context carries the deadline, and Options.LeaseMargin bounds
//	register_lambda_context          the claim by it (see above); nothing to register.
//	in-progress expiry               the lease: min(engine lease, deadline + margin), renewed by heartbeats while the handler
//	                                 runs; a takeover after it is fenced (the stuck holder's completion fails with
//	                                 idem.ErrLeaseLost).
//	static_pk_value, sort_key_attr   dynamostore.Options: KeyPrefix, SortKey and SortKeyValue share a table in a single-table
//	                                 design. The partition key is always the record's own key, so records spread over
//	                                 partitions; one static partition for all records is not offered (a hot partition).
//	response_hook                    not offered as a hook: a proxy replay carries Idempotent-Replayed: true, and DoJSON's
//	                                 Result.Replayed tells a replay for code that calls the engine itself.
//	IdempotencyAlreadyInProgressError idem.ErrInFlight (*idem.InFlightError with RetryAfter); 409 for proxy events.
//	IdempotencyValidationError       idem.ErrMismatch; 422 for proxy events.
//	IdempotencyPersistenceLayerError idem.ErrStoreUnavailable; 503 for proxy events. The handler never runs unprotected
//	                                 unless asked (fail closed).
//	function name in the key         Options.Name (default AWS_LAMBDA_FUNCTION_NAME), as Powertools prefixes the key with
//	                                 the function's name; proxy keys are per caller instead, as in idemhttp.
//
// For SQS event source mappings with partial batch responses, the consumer/sqs package's
// LambdaHandler handles each record on its own; Wrap is for handlers that take one event as a
// whole.
//
// # Event sources: EventBridge, Kinesis, DynamoDB Streams, S3
//
// EventBridgeHandler, KinesisHandler, DynamoDBHandler and S3Handler turn a consumer.Consumer
// into a handler of the source's event type (github.com/aws/aws-lambda-go/events), as
// consumer/sqs's LambdaHandler does for SQS: each record becomes a consumer.Message
// (EventBridgeMessage, KinesisMessage, DynamoDBMessage, S3Message say what goes where), and the
// consumer runs its effect once per key.
//
//	key, _ := idemlambda.BodyKey("order_id") // in the EventBridge detail, the Kinesis data
//	c, _ := consumer.New(consumer.Options{Runner: eng, Key: key, Scope: "shipping"}, ship)
//	h, _ := idemlambda.EventBridgeHandler(c)
//	lambda.Start(h)
//
// The key is the business fact, never the transport's id: an EventBridge envelope's id and time
// belong to one put of the event (a producer's retried PutEvents, an archive replay carry the
// fact under a new id), so the key comes from detail; a Kinesis sequence number is a place in
// the stream (a retried PutRecord writes the fact twice), so it comes from the data; a DynamoDB
// Streams change is keyed on the event id the writer put in the item, or the item's key and
// version; an S3 notification on the object's bucket, key, version id and sequencer (S3Key).
//
// Asynchronous sources (EventBridge, S3) return an error matching ErrNotDone unless every
// record is done with, so Lambda retries the event, and the records done before replay. Stream
// sources (Kinesis, DynamoDB Streams) handle a shard's records in order and stop at the first
// one not done with, reporting it and every later record by sequence number in the batch item
// failures: Lambda retries from that checkpoint, and a record sent again after it was done
// (a whole batch again, a bisected half) is a duplicate, its effect not run again.
//
// These handlers claim keys through the consumer's runner, whose lease is the engine's
// Options.Lease, not bounded by the invocation's deadline as Wrap's is: set it a little above
// the function's timeout, so that the record of an invocation stopped at its timeout is free for
// the platform's retry soon after (until then the retry finds it in flight and reports it).
//
// The repository's examples/lambda-events is a complete function for the four sources, tested
// in a local runtime loop against each one's retries.
package idemlambda

// Package idemfiber is idem's idempotency middleware for Fiber v2, native to fasthttp: the
// same HTTP semantics as package idemhttp, without going through net/http. It is its own Go
// module, so a user of idem who does not use Fiber does not download fasthttp.
//
// # Use
//
//	eng, _ := idem.New(store, idem.Options{})
//	mw, _ := idemfiber.New(idemfiber.Options{Runner: eng})
//	app.Post("/v1/charges", mw, chargeHandler) // or app.Group("/v1", mw)
//
// # Semantics
//
// They are idemhttp's (see its documentation), item by item:
//
//   - The key is the Idempotency-Key header (idem.KeyHeader), parsed by idemhttp.ParseKey: a
//     structured-field string or a bare token of 1 to 255 printable ASCII characters. An
//     invalid key, or the header sent twice, is answered 400; a processed request without a
//     key passes through, or is answered 400 with Options.RequireKey. Only Options.Methods
//     are processed (POST and PATCH by default); others pass through untouched.
//   - The scope (Options.Scope) prefixes the storage key (idemhttp.StorageKey), so tenants
//     never see or block each other's keys.
//   - The fingerprint is the method, the path, the query and the body, as idemhttp's
//     RawFingerprint computes it. The same key with another fingerprint is answered 422 and
//     has no effect.
//   - The key is claimed by idem.Engine.Do in one atomic store operation before the handler
//     runs; the handler's status, headers (minus hop-by-hop ones, Set-Cookie, Date, Server and
//     Content-Length) and body are stored and replayed byte for byte with
//     Idempotent-Replayed: true. Responses the engine's policy does not keep (5xx, 429, …)
//     release the key, so a retry executes.
//   - A duplicate while the first is running gets 409 with Retry-After (or waits, with
//     idem.Options.Wait); a store that cannot be reached gets 503 with Retry-After and the
//     handler does not run (fail closed).
//   - Every refusal is an application/problem+json body whose type is one of idemhttp's
//     Problem* URIs.
//
// # Begun is not undone
//
// Fiber buffers the response until the handler chain returns, so nothing reaches the client
// while the handler runs; what counts is whether the effect may have happened. The middleware
// takes "the handler set a status other than 200 or wrote a body" as the sign that it began to
// answer, as idemhttp takes the first write:
//
//   - The handler returns an error, or panics, before it began to answer: the claim is
//     released (a retry executes) and the error or panic goes on to Fiber's error handler or
//     to a recover middleware (use one: fasthttp does not recover panics).
//   - It returns an error or panics after it began to answer: the effect may have happened,
//     so the claim is held as uncertain (idem.Uncertain) until its lease runs out or an
//     operator resolves it; a retry meanwhile gets 409, never a second execution. The error
//     or panic then goes on as above.
//
// A response body larger than Options.MaxResponseBody is sent but not kept: a retry gets
// idemhttp.ProblemNotRetained with the original status, never a second execution.
package idemfiber

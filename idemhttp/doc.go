// Package idemhttp is net/http middleware that gives a handler Idempotency-Key semantics, after
// the IETF draft "The Idempotency-Key HTTP Header Field" and Stripe's behaviour: a request
// retried with the same key runs the handler once; every retry gets the first response again.
//
// The middleware is a plain func(http.Handler) http.Handler, so it fits net/http's ServeMux,
// chi, gorilla/mux and any router that takes standard middleware. The handler behind it knows
// nothing of idempotency.
//
//	st, _ := sqlitestore.Open(ctx, "idem.db", sqlitestore.Options{})
//	eng, _ := idem.New(st, idem.Options{TTL: 24 * time.Hour})
//	mw, err := idemhttp.New(idemhttp.Options{
//		Runner: eng,
//		Scope:  idemhttp.KeyedHeaderScope("X-API-Key", scopeSecret), // whose key it is
//	})
//	mux.Handle("POST /v1/charges", mw(chargeHandler))
//
// # Requests
//
// Only the configured methods are processed (Options.Methods, default POST and PATCH); others
// pass through untouched. The key is the Idempotency-Key header, as a structured-field string
// ("abc") or a bare value (abc): 1 to 255 printable ASCII characters once unquoted (ParseKey).
// A request without a key passes through untouched, or gets 400 when Options.RequireKey is set.
// Webhook receivers take the key from the sender's event id instead: HeaderKey (GitHub's
// X-GitHub-Delivery), JSONKey (a Stripe event's "id") or FuncKey.
//
// The body is read up to Options.MaxRequestBody (413 beyond) and handed on to the handler. The
// request's fingerprint is its method, path, query and body bytes (RawFingerprint), or its JSON
// body canonicalised, with chosen fields ignored (JSONFingerprint, CanonicalJSON). The same
// key with another fingerprint — another body, or another path — gets 422 and has no effect.
//
// The record a key claims carries the request's route, for operators who list records
// (`idem list`, the operator console): the pattern the http.ServeMux matched when the
// middleware wraps the handler it routes to, such as "POST /v1/orders/{id}/pay", or else the
// method and the path (DefaultRoute). Options.Route names it otherwise, or not at all
// (NoRoute).
//
// # Memory
//
// A body is read as it arrives, into a buffer that grows with the bytes received: a declared
// Content-Length is checked against Options.MaxRequestBody but reserves nothing, so a client
// that declares a large body and sends little costs little. Options.MemoryBudget (64 MiB by
// default) bounds the request and response buffers of all the requests in flight together: a
// request that would go over it while its body is read gets 503 with Retry-After before any
// claim is taken (the handler does not run; a retry with the key is safe), and a response that
// would go over it is streamed and not retained, as a response over Options.MaxResponseBody
// is. Buffers that grew large are not pooled, so memory taken by a burst goes back to the
// garbage collector. Requests the middleware does not read — other methods, and requests
// without a key when the key is a header — stream to the handler untouched: bound them with
// http.MaxBytesHandler if they need a bound.
//
// # Scopes and storage keys
//
// A ScopeFunc names the tenant a request acts for, and New requires one (Options.Scope): a
// function of your own that returns the account your authentication resolved, or
// KeyedHeaderScope, which hashes a header such as X-API-Key with HMAC-SHA256 under a secret,
// so that no credential is stored. SingleCaller declares that one trusted caller is the only
// one to use the API, so that keys are global. The storage key is StorageKey(scope, key): scope, "|",
// key. Two tenants with the same key never see, block or probe each other's records. The route
// is not part of the storage key: as in the draft and at Stripe, a key is unique per client,
// and reusing it on another route is a mismatch (422), not a new request.
//
// # Responses
//
// The handler's response is buffered (up to Options.MaxResponseBody) and, once the handler
// returns, stored and then sent, so that a client that got an answer and retries gets it
// replayed — provided the store took it. If the store fails from the moment the handler
// returns until the engine gives up (its Options.StoreTimeout: it retries storing the result
// until then, renewing the claim's lease), the client still gets the handler's answer (without
// ExpiresHeader; the Event has outcome executed and an Err matching idem.ErrStoreUnavailable),
// but no record of it: a retry gets 503 store-unavailable while the store is down, 409
// in-flight while the claim's lease lasts (the engine's Options.Lease from its last renewal),
// and once the lease has run out it executes: the handler runs a second time. An effect that
// must not run twice even then belongs in transaction mode (Options.Runner with a store's
// transaction runner, such as pgstore.NewTxRunner), where the effect and its record commit
// together, or behind its own guard. Status, body bytes and headers are stored, minus hop-by-hop headers and
// Options.DenyHeaders (default Set-Cookie); a replay writes exactly those, plus
// Idempotent-Replayed: true. Trailers are not captured. Handlers may call WriteHeader late or
// never (200 with no body), write in many pieces, and flush: http.Flusher and
// http.ResponseController work, but a flush sends nothing until the body outgrows
// Options.MaxResponseBody — an answer is sent only once it is stored, so no client holds an
// answer that a crash could lose (streaming endpoints such as server-sent events belong
// outside the middleware, or on requests without a key). Hijacking is not
// supported under the middleware (ErrHijackNotSupported): keep upgrade routes outside it.
//
// A body larger than Options.MaxResponseBody is streamed to the client as it is written, and the
// record is completed without it: a retry gets the original status and headers with a
// problem+json body of type ProblemNotRetained — never a second execution, never a truncated
// body.
//
// Which statuses are kept is the engine's idem.Policy: by default 5xx, 401, 403, 408, 409,
// 425 and 429 release the key (a retry executes) and all else is kept; idem.StoreServerErrors
// keeps 5xx too, as Stripe does. A handler can override the policy for one request with
// MarkFailed (nothing happened: release) or MarkUncertain (the effect may have happened: hold
// the claim, per the engine's idem.UncertainPolicy).
//
// With Options.ExpiresHeader, kept responses and replays carry ExpiresHeader
// ("Idempotency-Expires", an HTTP-date): until then a retry with the key is safe and replays.
//
// # Errors
//
// Errors are application/problem+json (RFC 9457) with a stable type URI:
//
//	400 https://idemkit.dev/problems/missing-key        the route requires a key
//	400 https://idemkit.dev/problems/invalid-key        the key is malformed or sent twice
//	400 https://idemkit.dev/problems/invalid-scope      the caller could not be scoped
//	400 https://idemkit.dev/problems/scope-header-spelling  the scope header came as X_API_KEY
//	400 https://idemkit.dev/problems/invalid-body       the body could not be read
//	413 https://idemkit.dev/problems/request-too-large  the body is over MaxRequestBody
//	409 https://idemkit.dev/problems/in-flight          the original is still running (Retry-After)
//	422 https://idemkit.dev/problems/mismatch           the key was used with another request
//	503 https://idemkit.dev/problems/store-unavailable  the store failed; nothing ran (Retry-After)
//	503 https://idemkit.dev/problems/overloaded         over Options.MemoryBudget; nothing ran (Retry-After)
//	500 https://idemkit.dev/problems/handler-panic      the handler panicked before answering; the key is released
//	xxx https://idemkit.dev/problems/response-not-retained  replay of a response too large to keep
//
// In-flight duplicates get 409 at once, or, with the engine's Options.Wait, wait (bounded)
// for the original and replay its response.
//
// # Failure
//
// If the store fails before the handler runs, the middleware fails closed: 503 with
// Retry-After, and the handler does not run. Options.FailOpen runs it unprotected instead,
// logging every such request. If the handler panics before it began to answer (before
// WriteHeader or Write), the engine releases the claim, the client gets a 500 problem and the
// panic goes on to http.Server. Once it began to answer, the effect may have happened: begun is
// not undone. A later panic or abort (http.ErrAbortHandler, as httputil.ReverseProxy raises
// when the upstream's answer breaks off) holds the claim as uncertain (the engine's
// idem.UncertainPolicy), never releases it; the client's answer is cut off, so it never
// mistakes it for a success, and the panic goes on to http.Server. One exception: a response
// over MaxResponseBody, already streaming, whose client went away is completed without its
// body, as if the client had read it all; a retry gets response-not-retained.
//
// # Observability
//
// Options.OnEvent gets an Event per request: its Outcome (executed, released, uncertain,
// oversize, replay, in_flight, mismatch, bypass, fail_open, store_error, overloaded,
// invalid_key, invalid_scope, invalid_body, missing_key, too_large, error — short strings fit
// for a metrics label), the status, the time in the middleware and in the handler, and the
// error behind a failure. Warnings go to Options.Logger.
package idemhttp

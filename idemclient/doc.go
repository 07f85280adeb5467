// Package idemclient is a retrying http.RoundTripper that makes retries safe.
//
// The key identifies the intent, not the send: the Transport sets one Idempotency-Key per
// logical request (when the caller did not) and keeps it on every attempt, so a server that
// honours the key (idemhttp, the idem gateway, Stripe, …) runs the effect once however many
// attempts reach it.
//
// # Retries
//
// Exponential backoff with full jitter, a cap per delay, a cap on attempts and on total time,
// the context's deadline respected, and Retry-After (seconds or an HTTP date) honoured. Retried:
// network errors where the request may or may not have arrived (see [Retryable]), attempts cut
// short by Options.AttemptTimeout or by the base transport's ResponseHeaderTimeout, 5xx (but
// 501 and 505), 408, 429, and 409 from an in-flight original (a 409 with Retry-After). Never
// retried: any other 4xx — validation, authentication, 422 key reused with another payload —
// and nothing once the request's own context is done. A shared [RetryBudget] (token bucket) keeps a
// fleet of clients from multiplying load on a struggling server.
//
// A Retry-After longer than the time left is not a reason to give up: the server's figure
// estimates when the answer will exist, so the Transport asks once more at the last useful
// moment of its budget (Options.MaxElapsed).
//
// # Per-attempt timeouts
//
// Options.AttemptTimeout bounds one attempt, the answer's body included. A timed-out attempt
// may have reached the server; the Transport retries it with the same key, and the server
// answers the retry with the stored response (or 409 while the first is still running). The
// request's context bounds the whole request: when it is done, nothing is retried.
//
// # Durable intent keys
//
// A key minted per attempt protects nothing, and a key minted per process run protects
// nothing across a crash. [IntentKey] derives a stable key from the business intent (an HMAC
// of the action and its identifiers), and [WithKey] fixes the key for one operation, so a
// process that restarts and retries the same intent reuses the same key.
package idemclient

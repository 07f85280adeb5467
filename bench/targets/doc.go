// Package targets holds what idem's benchmarks put under load, each the same small JSON API:
//
//   - Upstream: the API behind the proxies, optionally slow (to hold requests in flight),
//     counting the most requests it held at once;
//   - BareProxy: the baseline of the gateway benchmark, a bare but tuned
//     httputil.ReverseProxy (connection reuse, a buffer pool);
//   - BareHandler and IdemHandler: a plain net/http handler, and the same behind idemhttp;
//   - FiberApp: the same answer from Fiber v2, bare or behind Fiber's idempotency middleware.
//
// # Fairness
//
// Each middleware is compared with its own bare handler, in its own process, under the same
// load, so each one's added cost is measured against the server it runs in. Both answer 201
// with the same body; both see the same 36-byte Idempotency-Key (Fiber's middleware requires
// 36 bytes, the size of a UUID).
//
// They do not promise the same thing: idemhttp fingerprints the request (a reused key with
// another body gets 422), records the claim before running the handler (a duplicate in flight
// gets 409, across processes with a shared store) and stores status, headers and body; Fiber's
// middleware locks the key in-process, runs the handler, and stores the response afterwards.
package targets

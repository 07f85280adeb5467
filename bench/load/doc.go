// Package load is the load generator of idem's benchmarks: a fixed number of concurrent
// keep-alive HTTP clients on loopback, for a fixed time or number of requests, reporting
// throughput and latency quantiles.
//
// # Modes
//
// Every request is the same POST with a small JSON body; the Mode decides its
// Idempotency-Key: none (NoKey, the pass-through path of a gateway), a new one each time
// (NewKey, the execute path) or the same one per client (Replay, the replay path, primed
// before the measured window).
//
// # Measurement
//
// Each client records its own latencies in a Histogram (fixed size, 0.8% precision); they
// are merged at the end, so measuring costs no lock and no allocation per request. Requests
// that end after the deadline are not counted, and the window's length is the time from its
// start to the deadline (or to the last answer when Options.Requests ended the run), so
// Throughput is requests answered per second of measured window.
//
// # Bounds
//
// A Run ends after Warmup + Duration (plus at most one Timeout for requests in flight) or
// after Requests measured requests, whichever comes first, or when its context ends. It holds
// one connection per client and a fixed amount of memory per client.
package load

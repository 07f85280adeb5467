// Package faultproxy is a small TCP proxy that injects network faults between a client and a
// server, for tests that must show what survives them.
//
// # Exchanges
//
// The proxy forwards bytes both ways and sees a connection as a sequence of exchanges: the
// client sends (a request), then the server answers (a response), then the client sends again.
// That is exactly HTTP/1.1 without pipelining, and close enough for most request/response
// protocols (PostgreSQL, Redis). At the start of each exchange the proxy rolls its dice:
//
//   - drop the request: both connections are closed and the server never sees it;
//   - drop the response: the request is forwarded whole, and both connections are closed when
//     the first byte of the answer comes back, so the server has acted and the client never
//     hears of it (the case an idempotency key exists for);
//   - delay: the request is held for a random time before it is forwarded.
//
// CutAll closes every open connection at once, like a network blip. Connections are closed
// with a reset (SO_LINGER 0), not a graceful close.
//
// # Observing
//
// Every fault is counted (Stats) and, with Options.OnFault, reported as an Event carrying the
// start of the request it hit, so a test can tell which operation was affected and classify
// what follows (for instance a re-execution after a lost answer).
//
// # Limits
//
// It is a test tool: it binds to loopback by default, keeps no limits on connections, and
// decides per exchange, not per byte.
package faultproxy

// Package harness runs idem's load benchmarks: it starts the servers under test as separate
// processes on loopback, drives them with package load, reads their CPU time and memory from
// /proc, and writes Markdown reports with every figure beside its baseline from the same run.
//
// # Gateway (issue 6)
//
// RunGateway measures the idem serve binary against a bare, tuned httputil.ReverseProxy
// (targets.BareProxy) to the same upstream: requests without a key (pass-through), a new key
// per request and replays, on the memory store; the new-key path on PostgreSQL against pgbench
// running the same two statements; and the gateway's peak RSS (VmHWM) while thousands of keys
// are in flight on a slow upstream. Cases run in interleaved rounds, and ratios are medians of
// per-round ratios, so a drift in the machine's load cancels out.
//
// # Middleware (issue 9)
//
// RunMiddleware measures the CPU time each idempotency middleware adds per request to its own
// bare server: idemhttp over net/http, and Fiber v2's idempotency middleware over bare Fiber,
// on the new-key and replay paths. Each server is its own process, so its CPU time
// (/proc/PID/stat) is its own.
//
// # Bounds
//
// Every load run has a duration or a request count and a timeout, every wait for a server a
// 30-second limit, and every process started is stopped (SIGTERM, then SIGKILL after 10s) before
// the run returns; children also die with the harness (Pdeathsig).
//
// # Command
//
// Main is the idembench command line (bench/cmd/idembench); scripts/bench-gateway.sh and
// scripts/bench.sh build and run it.
package harness

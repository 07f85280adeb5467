// Package chaos is idem's proof under fire: a harness that runs real `idem serve` processes
// sharing one store, in front of a real upstream that records every effect in PostgreSQL,
// drives them with retrying clients that send duplicates, and injects faults at random. It
// then judges the run from the effect table and the clients' logs.
//
// The harness itself is a test behind the build tag `chaos` (so `go test ./...` does not run
// it); this package holds the verdict, which ordinary tests check can tell a good history
// from a bad one.
//
// # Running
//
//	go test -tags chaos -count=1 -v -timeout 30m ./internal/chaos/               # 5,000 operations
//	IDEM_CHAOS_OPS=100000 go test -tags chaos -count=1 -v -timeout 3h ./internal/chaos/
//
// Environment: IDEM_CHAOS_OPS (default 5000), IDEM_CHAOS_STORE (postgres, the default: a
// private PostgreSQL started with initdb on a free loopback port, so it can be killed and
// restarted; redis: a private redis-server with an fsync-always append-only file; sqlite: a
// file shared by the gateways, no store restarts), IDEM_CHAOS_GATEWAYS (default 3),
// IDEM_CHAOS_CONCURRENCY (operations in flight, default 48), IDEM_CHAOS_SEED, and
// IDEM_POSTGRES_URL for the effect table (default the local server, database test).
//
// # Faults
//
//   - kill -9 of a gateway, at random, mid-request, and its restart;
//   - crash and restart of the store server (PostgreSQL immediate shutdown, SIGKILL of Redis);
//   - a fault proxy (package faultproxy) between the clients and each gateway and between each
//     gateway and the upstream, that drops requests, drops answers after the server acted,
//     and delays requests;
//   - the upstream itself answers 503 before acting, now and then.
//
// # Verdict
//
// The upstream is not idempotent: it inserts one row per execution, so a double is a second
// row. Judge counts, and the run must show zero of each:
//
//   - executions beyond an operation's first that no documented window explains;
//   - successful answers that are not the answer of a recorded execution;
//   - operations whose successful answers differ (replays that differ from the original);
//   - deliveries with another payload under a used key answered with success;
//   - stuck keys: once every lease has expired, each operation is sent once more with no
//     fault, and it must succeed.
//
// Separately it counts the re-executions that invariant 1 documents: a gateway killed after
// the upstream acted but before the record was completed leaves an in-progress claim, which a
// retry takes over once its lease expires, and the upstream acts again; the same when the
// upstream's answer is lost on its way to the gateway (an uncertain outcome, held until its
// lease expires). A re-execution is put in these classes only when the previous execution's
// own gateway process was killed within a few seconds of it, or the fault proxy cut off that
// very execution's answer; any other second execution is a failure.
package chaos

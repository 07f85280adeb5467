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
//	make chaos-short                      # 2,000 operations per store, then the planted stores
//	IDEM_CHAOS_OPS=100000 make chaos      # the long form
//
// Environment: IDEM_CHAOS_OPS (per store, default 5000), IDEM_CHAOS_STORES (a comma list of
// postgres: a private PostgreSQL started with initdb on a free loopback port, so it can be
// killed and restarted; redis: a private redis-server with an fsync-always append-only file;
// sqlite: a file shared by the gateways, no store restarts; default postgres,redis),
// IDEM_CHAOS_FAULTS (a comma list of fault classes, default all), IDEM_CHAOS_TENANTS
// (callers, each with its own scope header value, all sending the same keys and bodies; default
// 3), IDEM_CHAOS_GATEWAYS (default 3), IDEM_CHAOS_CONCURRENCY (operations in flight, default
// 48), IDEM_CHAOS_SEED, IDEM_CHAOS_PLANTED_OPS and IDEM_CHAOS_PLANTED_FENCES (a planted run's
// operations, default 60, and aims per fence leg, default 6), IDEM_CHAOS_KEEP=1 (keep the
// effect table and the gateways' logs, whose paths the run prints), and
// IDEM_POSTGRES_URL for the effect table (default the local server, database test).
//
// # Faults
//
//   - kill: kill -9 of a gateway, at random, mid-request, and its restart;
//   - pause: SIGSTOP of a gateway for longer than its lease, then SIGCONT (its claims are taken
//     over meanwhile; its later completions must fail with ErrLeaseLost);
//   - store: crash and restart of the store server (PostgreSQL immediate shutdown, SIGKILL of
//     Redis);
//   - net: a fault proxy (package faultproxy) between the clients and each gateway and between
//     each gateway and the upstream, that drops requests, drops answers after the server acted,
//     and delays requests;
//   - upstream: the upstream answers 503 before acting, now and then; and for a few operations,
//     once it acted, cuts its answer mid-body or mid-chunk, answers later than the gateway's
//     upstream timeout, or takes longer than the lease while the clients give up on attempts
//     and retry;
//   - client: for a few operations, a client sends half a request and goes away, or goes away
//     once the answer begins (mid-download, for an answer larger than the gateway keeps);
//   - release: an operator runs `idem release` on operations in flight, and `idem release
//     --force` on completed ones;
//   - fence: aimed where fencing decides. Completion leg: a gateway is stopped past its lease
//     as its slow effect reaches the upstream, another takes the key over and runs its own,
//     and the first resumes in the middle of it: its completion must be refused. Extension leg:
//     a relay between a gateway and the store holds back the store's answers past the lease
//     while the gateway's claim lands, another gateway takes the key over, and the first must
//     be refused the extension it asks for before starting, and not start;
//   - deploy: rolling restarts (SIGTERM, the gateway drains and exits, a new one starts), with
//     a drain shorter than some upstream calls; and an aimed leg: a gateway is stopped so as
//     its 2.5s effect reaches the upstream, and its drain cuts the call. A re-execution after
//     a drain is not excused, except once the call the drain cut had reached its deadline and
//     the lease had run out after it (the key kept as an uncertain outcome, then taken over):
//     counted apart.
//
// Some effects are slow on purpose (0.2–1.5s; the fence class's take 1.2s), so that pauses,
// deploys and takeovers land while effects run.
//
// # Planted bugs
//
// TestChaosPlantedBugsFail runs the gateways of the planted command: the real PostgreSQL and
// Redis stores with one guarantee removed in their own path (Complete unfenced, Extend
// unfenced, both; keys without their scope; no lease extended past one lease from now, which
// removes the floor a draining gateway puts under the calls it cuts), under the faults aimed
// at it, and requires the verdict to fail where the bug lives (unexplained re-executions of
// the fence class's or the deploy class's aimed operations; answers that belong to another
// tenant).
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
//     fault, and it must succeed;
//   - answers that belong to another tenant.
//
// A re-execution is excused only when the execution before it was never completed (no client
// got its answer, except live from a gateway that logged it could not store it) and its own
// gateway process was killed, paused past its lease, cut off from the store past half a lease,
// or lost the upstream's answer, between that execution's request and half a lease before the
// re-execution; or when the re-execution itself was never completed and was run by a gateway
// just resumed from a pause past its lease (it sent its request after its claim was taken
// over); or when an operator force-released the completed key in between. Each excuse is
// counted separately.
package chaos

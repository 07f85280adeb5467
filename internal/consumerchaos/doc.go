// Package consumerchaos is the consumer face's proof under fire: a harness that runs real
// consumer processes (package consumer through its broker adapters) sharing one PostgreSQL
// idem store, feeds them facts through a real broker, some published twice with new message
// ids, injects faults at random, and judges the run from an effects table.
//
// The harness is a test behind the build tag `chaos` (so `go test ./...` does not run it);
// this package holds the verdict, which ordinary tests check can tell a good history from a
// bad one.
//
// # Running
//
//	make chaos-consumers-short           # 200 facts per broker and mode, and the planted bugs
//	make chaos-consumers                 # 5,000 facts per broker and mode
//
// Environment: IDEM_CCHAOS_FACTS (facts per broker and mode), IDEM_CCHAOS_BROKERS (a comma
// list of nats, amqp, redis, sqs; default all), IDEM_CCHAOS_MODES (tx, engine; default
// both), IDEM_CCHAOS_SELFTEST_FACTS (facts per planted bug, default 150),
// IDEM_CCHAOS_HISTORY (a directory where each run's history is written as JSON), and the
// services' usual IDEM_POSTGRES_URL, IDEM_NATS_URL, IDEM_AMQP_URL, IDEM_REDIS_ADDR, IDEM_SQS_ENDPOINT.
//
// # Faults
//
// Each run has three worker processes (the test binary run again as a consumer), restarted
// when they die, each handling four messages at a time:
//
//   - a worker kills itself (SIGKILL) now and then after writing an effect and before its
//     completion (mid-effect), and after its completion before the adapter's ack;
//   - the harness kills a worker with SIGKILL at random moments, and stops one with SIGSTOP
//     for longer than the lease, then resumes it;
//   - every worker reaches PostgreSQL through a relay that resets all its connections now
//     and then and drops a few requests and answers, and reaches the broker through another
//     relay that resets all its connections now and then (the shared brokers themselves are
//     never restarted);
//   - a handler fails before its effect now and then (a nack and a redelivery), and takes
//     longer than the broker's ack wait now and then (a redelivery unless the adapter extends
//     it);
//   - about a third of the facts are published twice, each copy with its own message id.
//
// Then the faults stop, fresh workers drain the broker, and every worker is stopped.
//
// # The outbox source
//
// TestOutboxChaos feeds the consumers through the outbox instead: producers commit each
// fact's business row and its event in one PostgreSQL transaction (pgoutbox.Add), and two
// relay processes (outbox.Relay with natsout or amqpout) publish the events through the
// run's fault relays. The relays are killed and stopped past their lease like the workers,
// and kill themselves now and then between an event's publish and its mark-sent; the
// consumers key each event by its Idempotency-Key header. The drain also waits for the
// outbox to have nothing unsent. Planted bugs (a relay marking sent before publishing, a
// consumer keyed by the transport's id) must fail it.
//
//	make chaos-outbox                    # 3,000 events per broker (IDEM_CCHAOS_OUTBOX_FACTS)
//
// Environment: IDEM_CCHAOS_OUTBOX_FACTS (default IDEM_CCHAOS_FACTS, then 200),
// IDEM_CCHAOS_OUTBOX_BROKERS (nats, amqp), IDEM_CCHAOS_OUTBOX_MODES (tx, engine; default tx),
// IDEM_CCHAOS_OUTBOX_SELFTEST_FACTS (events per planted bug, default 150).
//
// # Verdict
//
// The effects table holds one row per execution of a fact's effect. Judge counts, and the run
// must show zero of each: re-executions no excuse explains, facts never executed, effects of
// facts never published, dead-lettered deliveries, and messages left on the broker.
//
// In transaction mode (pgstore.NewTxRunner: the effect row commits with the completion) no
// re-execution is ever excused. In engine mode the effect is outside the store, and a
// re-execution is excused only when the execution before it was never completed (its worker
// logged no completed Processed result for it) and its worker was killed, or stopped past its
// lease, between that execution and half a lease before the next one (or before a store cut
// in the half lease before the kill or stop, after which a renewal of its claim may have
// failed), or logged that the completion could not be stored (consumer.Result.Err with
// Processed); or when the re-execution was run, and its completion refused, by a worker just
// resumed from a stop past its lease or cut off from the store (a store cut in the two leases
// before it): the documented window of a holder that was not dead after all. Each excuse is
// counted separately.
package consumerchaos

// Package amqp consumes RabbitMQ (AMQP 0-9-1) queues so that the effect of each business event
// happens once, although RabbitMQ delivers every message at least once. It adapts a
// *consumer.Consumer (see package consumer) to github.com/rabbitmq/amqp091-go.
//
// # Running a consumer
//
// [Run] consumes a queue on a channel with manual acks, a prefetch count equal to its
// concurrency, until its context is done; then it cancels the consumer, lets the handlers under
// way finish and ack, and returns.
//
//	ch, _ := conn.Channel()
//	err := amqp.Run(ctx, ch, "orders", c, amqp.Options{Concurrency: 16})
//
// # Acks
//
// Each delivery is settled as its consumer.Result says ([Settle]):
//
//   - OutcomeExecuted, OutcomeReplay: Ack.
//   - OutcomeInFlight (another consumer holds the key now) and OutcomeFailed: Nack with requeue, after
//     Result.RetryAfter (AMQP has no delayed requeue, so the handler slot waits).
//   - OutcomeRejected: Nack without requeue: the queue's dead-letter exchange gets it, if it has one.
//
// # Crashes
//
// A consumer killed after the effect and before its ack leaves a completed record; RabbitMQ
// requeues the unacked delivery when the connection drops, and the redelivery is a replay,
// acked without running the effect again. The tests kill real consumer processes (SIGKILL)
// between effect and ack over 1,000 messages and find every effect exactly once. A process
// killed while other deliveries are in the middle of their effect leaves those claims in flight
// until the engine's lease runs out, after which a redelivery takes over and runs the effect
// again; with pgstore's DoTx as the consumer's runner (see consumer.Runner) the effect commits
// with its completion and even that cannot happen.
//
// AMQP has no lease on a delivery: an unacked message stays with its consumer until acked or
// until the channel closes, so there is nothing to extend on the broker while an effect runs
// (the engine still extends its claim in the store).
//
// # Transport ids are not keys
//
// A publisher's retry, or a message republished from a dead-letter queue, gets a new
// message-id and delivery tag; the key comes from the business fact in the body
// (consumer.Options.Key).
//
// # Tests
//
// The tests run the consumer/consumertest suite against the RabbitMQ server given by
// IDEM_AMQP_URL (default amqp://guest:guest@127.0.0.1:5672/), one queue per test, counting
// effects in PostgreSQL (IDEM_POSTGRES_URL); a crash cuts the TCP connection without the AMQP
// close handshake.
package amqp

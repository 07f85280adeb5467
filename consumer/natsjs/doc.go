// Package natsjs consumes NATS JetStream so that the effect of each business event happens
// once, although JetStream delivers every message at least once. It adapts a
// *consumer.Consumer (see package consumer) to github.com/nats-io/nats.go/jetstream.
//
// # Running a consumer
//
// [Run] consumes a jetstream.Consumer (a durable pull consumer with explicit acks) with
// bounded concurrency until its context is done, then stops gracefully. [Handler] gives a
// jetstream.MessageHandler instead, for a Consume the caller runs itself.
//
//	cons, _ := js.CreateOrUpdateConsumer(ctx, "ORDERS", jetstream.ConsumerConfig{
//		Durable: "billing", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second,
//	})
//	err := natsjs.Run(ctx, cons, c, natsjs.Options{Concurrency: 16})
//
// # Acks
//
// Each message is settled as its consumer.Result says ([Settle]):
//
//   - OutcomeExecuted, OutcomeReplay: Ack.
//   - OutcomeInFlight (another consumer holds the key now): NakWithDelay(Result.RetryAfter); it comes
//     back when the holder has finished, as a replay, or died, as a takeover.
//   - OutcomeFailed: Nak (NakWithDelay with consumer.Options.RetryDelay when set); it comes back
//     until the consumer's MaxDeliver.
//   - OutcomeRejected: Term, so it never comes back.
//
// A consumer that dies after the effect and before its Ack leaves a completed record: after
// AckWait JetStream redelivers the message, which is a replay and is acked without running
// the effect again.
//
// # Long effects
//
// While an effect runs, the engine extends its claim in the store, and the message is marked
// in progress (Msg.InProgress) every [Options.InProgressEvery], a third of the consumer's
// AckWait by default, so that JetStream does not hand it to another consumer meanwhile. If it
// did anyway (a stalled process), the idem claim would hold the copy off as OutcomeInFlight.
//
// # Transport ids are not keys
//
// A producer that retries a publish gets a new stream sequence, and a message id given for
// JetStream's own de-duplication (Nats-Msg-Id) only covers its duplicate window. The key
// comes from the business fact in the body (consumer.Options.Key), which holds for every copy,
// whenever it arrives.
//
// # Tests
//
// The tests run the consumer/consumertest suite against the NATS server given by
// IDEM_NATS_URL (default nats://127.0.0.1:4222, with JetStream), counting effects in
// PostgreSQL (IDEM_POSTGRES_URL), one stream per test.
package natsjs

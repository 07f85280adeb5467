// Package consumer makes the effect of a message happen once, although brokers deliver every
// message at least once. It is broker-neutral: consumer/natsjs (NATS JetStream), consumer/amqp
// (RabbitMQ), consumer/sqs (SQS, SNS fan-out, Lambda), consumer/kafka (Kafka consumer
// groups), consumer/redisstream (Redis Streams consumer groups) and consumer/kinesis (Kinesis
// data streams: shard leases, checkpoints, parents read before children) and
// consumer/dynamostream (DynamoDB Streams, read the same way) adapt it to their
// brokers; idemlambda's EventBridgeHandler, KinesisHandler, DynamoDBHandler and S3Handler
// adapt it to those Lambda event sources.
//
// # Why duplicates come
//
// At-least-once delivery makes duplicates part of the contract: an ack deadline or visibility
// timeout runs out while the work still runs; a consumer does the work and crashes (or loses
// its connection) before its ack; a producer retries a publish that had in fact succeeded; a
// dead-letter redrive sends everything again; SNS→SQS fan-out chains two at-least-once hops.
//
// # The key is the business fact, never the message id
//
// A [KeyFunc] derives the key from what the message is about: the order id, the transaction
// id, a producer's Idempotency-Key, the period of a scheduled job ("daily-report/2026-11-30").
// The transport's message id is useless as a key: SNS gives each queue of a fan-out its own SQS
// message id, and a producer's retry of a publish gets a new id from every broker. One order
// published twice and fanned out to two queues arrives as four messages with four ids and one
// order id; keyed on the order id, the charge happens once.
//
//	c, err := consumer.New(consumer.Options{
//		Runner: engine,
//		Scope: "billing", // another service consuming the same events uses its own scope
//		Key: func(m *consumer.Message) (string, error) {
//			var o struct{ ID string `json:"order_id"` }
//			if err := json.Unmarshal(m.Body, &o); err != nil || o.ID == "" {
//				return "", fmt.Errorf("no order id in %q", m.Body)
//			}
//			return "order/" + o.ID, nil
//		},
//	}, charge)
//
// The content of the message is fingerprinted (idem.Fingerprint of the body by default, or
// [Options.Fingerprint]): a key reused for a different event is rejected with
// idem.ErrMismatch instead of being skipped as a duplicate.
//
// # Outcomes
//
// [Consumer.Handle] runs the [Handler] through the idem engine (claim, effect, completion or
// release) and returns a [Result] whose [Outcome] tells the adapter what to do:
//
//   - [OutcomeExecuted]: the effect ran now. Ack.
//   - [OutcomeReplay]: it had run before; skipped, and the stored result returned. Ack.
//   - [OutcomeInFlight]: another consumer runs it now. Do not ack; redeliver after
//     Result.RetryAfter, when it is done (a replay) or its holder has died (a takeover).
//   - [OutcomeFailed]: the handler failed, or the store was unreachable and nothing ran (fail
//     closed). The claim is released; do not ack; redeliver.
//   - [OutcomeRejected]: the message can never be handled (no key, a key reused for another event,
//     or the handler returned [Reject]). Dead-letter it.
//
// A consumer that crashes after the effect and before its ack leaves a completed record: the
// redelivery is a replay and is acked without running the effect again. A consumer that
// crashes while the effect runs leaves its claim in flight until the engine's lease runs out;
// redeliveries meanwhile are OutcomeInFlight, and the first after it takes over and runs the effect
// (at-least-once for a holder that died mid-effect, as idem documents). Transaction mode closes
// that last gap for effects that live in the store's database.
//
// # Transaction mode
//
// Give New a transactional [Runner] (pgstore.NewTxRunner; mysqlstore and sqlitestore have the
// same) instead of an engine: the claim, the handler's writes and the completion then run in
// one database transaction, and the handler takes it from its context with the store's
// TxFromContext:
//
//	c, err := consumer.New(consumer.Options{Runner: pgstore.NewTxRunner(st, pgstore.TxOptions{}), Key: orderKey},
//		func(ctx context.Context, m *consumer.Message) ([]byte, error) {
//			tx := pgstore.TxFromContext(ctx)
//			_, err := tx.Exec(ctx, "INSERT INTO charges (order_id) VALUES ($1)", orderID(m))
//			return nil, err
//		})
//
// The adapters ack only after Handle returns OutcomeExecuted, which in this mode means after the
// commit. A handler error, a panic, a process killed mid-effect or a failed COMMIT roll
// everything back: no row, no record, and the redelivered message runs the effect once. A
// duplicate delivered while the first transaction runs waits for it to end, then replays its
// result (a replay) or, after a rollback, runs the effect itself.
//
// # Cost
//
// A duplicate costs one store round trip (the claim finds the completed record), a new event
// two (claim and completion). While a long effect runs, the engine extends its lease in the
// store (idem.Options.Heartbeat) and the consumer calls the adapter's [Message.Extend] hook
// every [Message.ExtendEvery], which tells the broker that the message is still being worked on
// (JetStream InProgress, SQS ChangeMessageVisibility).
//
// # Results
//
// The handler may return a small result (a receipt id, a charge id). It is stored with the
// record and returned in Result.Output to every duplicate, up to [Options.MaxResult] bytes.
//
// # Conformance
//
// consumer/consumertest is the one suite every adapter passes: duplicates published with fresh
// transport ids, consumers crashing between effect and ack, concurrent consumers on one queue,
// effects that fail and must be redelivered (which catches an adapter that acks before the
// effect); every effect exactly once, no message lost, none left unacked. It needs nothing but
// the broker, so adapters outside this module can run it too.
package consumer

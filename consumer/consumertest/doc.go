// Package consumertest is the conformance suite for consumer adapters: every broker adapter
// (consumer/natsjs, consumer/amqp, consumer/sqs, consumer/kafka, consumer/redisstream)
// passes it unchanged.
//
// # What an adapter supplies
//
// A [Broker] makes a fresh, empty [Queue] for each subtest (its own stream, queue or topic,
// removed at cleanup), so subtests run in parallel. A Queue publishes a body as a new message
// with a fresh transport id, starts consumers that hand every delivery to a *consumer.Consumer
// and ack by the adapter's rules, and reports how many messages the broker still holds.
//
// To simulate a crash, a consumer started by Queue.Start calls the crash hook after
// Consumer.Handle returned an outcome to ack and before it acks. When the hook returns true,
// the consumer must behave like a process killed at that instant: not ack, drop its connection
// (or subscription) abruptly so that the broker redelivers every message it held, and stop;
// the suite then starts a new one.
//
//	func TestConformance(t *testing.T) {
//		consumertest.Run(t, myBroker{url: testenv.NATSURL(t)}, consumertest.Options{})
//	}
//
// # What it checks
//
//   - Duplicates: M business events, each published N times with fresh transport ids, consumed
//     by concurrent consumers on one queue, some effects slow (so that copies meet in flight),
//     some failing transiently: every effect exactly once.
//   - CrashBetweenEffectAndAck: at least 1,000 messages; consumers crash at random after the
//     effect and before the ack, and are replaced: every effect exactly once.
//   - AckAfterEffect: every event published once, the first attempt of every effect failing:
//     each message must come back and succeed. An adapter that acks a delivery before its
//     effect has succeeded loses the message (the broker deletes it, the effect fails, nothing
//     runs it again): the queue empties while effects are missing, and the test says so.
//   - CrashDuringEffect: one consumer at a time; on the first attempt of every tenth event the
//     consumer is killed while the effect runs (the effect then fails, as a killed process's
//     never finishes): each such message must come back to the next consumer and succeed. An
//     adapter that acks or commits a delivery before its effect has finished loses it. It needs
//     Workers that are [Killer]s, and is skipped (visibly) otherwise.
//   - Rejected: a message without a business key is not acked and its effect never runs,
//     while the others are processed.
//   - ScopesApart: four consumers, each on its own queue, share one store and receive the same
//     events, under (scope, key) pairs that a join of scope and key could merge: scope
//     "billing" with key "eu/1" and scope "billing/eu" with key "1", the same key in two
//     scopes, and an unscoped key that spells a scoped one ("billing|eu/1"). Each consumer's
//     effect runs once per event: none is taken for another consumer's duplicate.
//
// Every execution of the effect is recorded in an [Effects] (in memory by default, without any
// uniqueness, so a double effect counts twice); "exactly once" means every event has exactly
// one. After the consumers stop, the queue must hold no message: none lost, none left unacked.
// The idem store is memstore by default (one process); [Options.Store] supplies another, and
// [Options.Effects] another record of effects. [CrashReport] runs the crash scenario and
// returns its counts, so an adapter's test can show that the suite catches a consumer that
// does not deduplicate.
//
// # Outside this module
//
// The suite needs nothing but the broker under test: no database, no environment variables,
// nothing internal to idem. An adapter written elsewhere (another broker, a company's own
// transport) imports consumer/consumertest and calls [Run] from its tests.
//
// # Benchmarks
//
// [Throughput] measures an adapter's throughput without idem, on memstore and on the stores
// named in [BenchOptions.Stores] (new and duplicate messages) side by side in one run, with the
// store round trips per message.
package consumertest

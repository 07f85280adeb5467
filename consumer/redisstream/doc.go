// Package redisstream runs a consumer.Consumer on a Redis stream as a member of a consumer
// group (XREADGROUP, XACK, XAUTOCLAIM), with go-redis: the effect of each business event
// happens once, although a stream's group hands an entry to another consumer whenever its
// consumer did not ack it.
//
// # Usage
//
//	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
//	c, err := consumer.New(consumer.Options{
//		Runner: engine,
//		Key: func(m *consumer.Message) (string, error) {
//			if id := m.Header["order_id"]; len(id) == 1 && id[0] != "" {
//				return "order/" + id[0], nil
//			}
//			return "", fmt.Errorf("entry %s has no order_id", m.ID)
//		},
//	}, charge)
//	w, err := redisstream.NewWorker(rdb, c, redisstream.Options{Stream: "orders", Group: "billing"})
//	err = w.Run(ctx) // until ctx is done
//
// The key comes from the business fact: a field of the entry (its fields other than
// Options.BodyField are the Message's Header) or of its body. Never the entry id: a producer
// that retries an XADD writes the same event under a new id.
//
// # Acks and redelivery
//
// An entry read by a consumer of the group stays in the group's pending entries list, in that
// consumer's name, until it is acked. A Worker acks (XACK) an entry only when its outcome is
// settled:
//
//   - OutcomeExecuted and OutcomeReplay: acked.
//   - OutcomeFailed and OutcomeInFlight: not acked. Redis cannot delay a redelivery, so the worker resets
//     the entry's idle time (XCLAIM … IDLE) to make it claimable after Result.RetryAfter; it
//     is then taken again with XAUTOCLAIM, by this worker or another.
//   - OutcomeRejected: handed to Options.DeadLetter when set (XADD it to a dead-letter stream),
//     then acked; if DeadLetter fails, handled like OutcomeFailed. Without DeadLetter the entry is
//     logged and acked.
//
// # Dead consumers
//
// Every Options.ClaimEvery each worker takes over, with XAUTOCLAIM, the entries that have been
// pending for Options.MinIdle (default 30s): those of a consumer that died, or read and never
// started. So MinIdle is the redelivery timeout. While an effect runs, its worker claims its
// entry again every MinIdle/3 (the Message's Extend hook), which resets its idle time, so that
// a slow effect is not taken over; were it taken over anyway, the idem claim would make the
// second delivery OutcomeInFlight rather than run the effect twice.
//
// A worker that dies after an effect and before its ack leaves the entry pending: it is taken
// over after MinIdle and is a replay, acked without running the effect again. One that dies
// during the effect leaves the idem claim in flight until its lease runs out; the takeovers
// meanwhile are OutcomeInFlight, and the first after it runs the effect.
//
// # Testing
//
// The tests run the consumer/consumertest suite, and tests of reclaiming after MinIdle and of
// slow effects, against the Redis server given by IDEM_REDIS_ADDR (default 127.0.0.1:6379),
// each on a stream of its own.
package redisstream

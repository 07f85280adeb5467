// Package outbox is the producing half of "exactly once": a handler writes the events that
// announce its effect into an outbox table in the same database transaction as its business
// rows (and, in transaction mode, its idempotency record), and a Relay publishes them to a
// broker at least once, each carrying its idempotency key in the Idempotency-Key header so
// that the consumer side (package consumer) runs its effect once however often it arrives.
//
// Writing the row and the event in one transaction removes the dual write: there is never a
// committed payment without its event, nor an event for a payment that rolled back. The relay
// is at least once by construction (it publishes, then marks the row sent; a crash between
// the two publishes again), which the key makes harmless. Sent rows are kept for the store's
// retention, to look into, and then deleted in batches by Store.Sweep, which store/sweeper
// runs as it does for idem records.
//
// Events of one order key (Message.OrderKey: the entity or stream they are about, such as
// "order-42"; the event's idempotency key when unset) are published in the order they were
// written: only the oldest unsent event of an order key is ever handed to a relay, and a
// failed publish is retried, with backoff, before any later event of that order key. Events of
// other order keys are not held up by it. Give "order-42/created" and "order-42/paid" the
// order key "order-42": their idempotency keys differ (they are distinct facts), so without it
// they would not be ordered. The order holds for events whose transactions do not overlap: of
// two transactions that add events of one order key at the same time, the second to add may
// commit first, and a relay may publish its event before the other's (it hands out the oldest
// event it can see). Writers of one entity are usually serialized already, by a lock on the
// entity's row (its UPDATE, or SELECT ... FOR UPDATE) taken before they add its events; where
// they are not, take such a lock first. The order is also that of each event's first publish:
// a relay stopped past its lease (a paused process, a stalled network) may still deliver its
// copy of an event after another relay has published the order key's next one, a repeat that
// the consumer's key absorbs. Several relays may run against one table (one per process of a
// deployment): each claims events under a lease, and a relay that stops mid-publish leaves its
// events to another after the lease.
//
// The table lives in your database: package outbox/pgoutbox for PostgreSQL (pgx),
// outbox/mysqloutbox for MySQL and MariaDB, outbox/sqliteoutbox for SQLite; outbox/outboxtest
// is the conformance suite they pass. Publishers
// for the brokers the consumer package reads: outbox/natsout (NATS JetStream),
// outbox/amqpout (RabbitMQ), outbox/sqsout (Amazon SQS) and outbox/kafkaout (Kafka). Any other
// is a Publisher of a few lines.
package outbox

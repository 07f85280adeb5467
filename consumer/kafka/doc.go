// Package kafka runs a consumer.Consumer on a Kafka consumer group, with franz-go
// (github.com/twmb/franz-go): the effect of each business event happens once, although a
// consumer group hands a record to a new owner whenever its offset was not committed.
//
// # Usage
//
//	c, err := consumer.New(consumer.Options{
//		Runner: engine,
//		Key: func(m *consumer.Message) (string, error) {
//			var o struct{ ID string `json:"order_id"` }
//			if err := json.Unmarshal(m.Body, &o); err != nil || o.ID == "" {
//				return "", fmt.Errorf("no order id in %q", m.Body)
//			}
//			return "order/" + o.ID, nil
//		},
//	}, charge)
//	w, err := kafka.NewWorker(c, kafka.Options{},
//		kgo.SeedBrokers("127.0.0.1:9092"),
//		kgo.ConsumerGroup("billing"),
//		kgo.ConsumeTopics("orders"),
//	)
//	err = w.Run(ctx) // until ctx is done; then it commits and leaves the group
//
// The key comes from the business fact: a field of the value, or the record key (which
// Message puts in Header[KeyHeader]) when producers key records by order id. Never the
// offset: a producer's retry of a publish writes the same event at a new offset.
//
// # Commits
//
// Kafka's delivery state is one committed offset per partition: everything before it is done.
// A Worker commits a partition's offset only past records whose outcome is settled:
//
//   - OutcomeExecuted and OutcomeReplay: the record is marked; the marks are committed (synchronously)
//     after each poll's records are handled, and before partitions are revoked.
//   - OutcomeFailed and OutcomeInFlight: the partition stops at that record; after Result.RetryAfter the
//     partition's fetch position is set back to it, so it is fetched and handled again, and
//     nothing after it is committed meanwhile (records of one partition stay in order).
//   - OutcomeRejected: handed to Options.DeadLetter when set (produce it to a dead-letter topic),
//     then committed past; if DeadLetter fails, handled like OutcomeFailed. Without DeadLetter the
//     record is logged and committed past: Kafka has no dead-letter queue of its own.
//
// A worker that dies after an effect and before the commit leaves the offset behind: the next
// owner of the partition fetches the record again and gets a replay, so the effect does not
// run twice. One that dies during the effect leaves the idem claim in flight until its lease
// runs out; the next owner's attempts are OutcomeInFlight until then, and it takes over after.
//
// # Rebalances
//
// The worker uses kgo.BlockRebalanceOnPoll: a rebalance waits while a poll's records are
// handled. When one is pending (kgo.OnPartitionsCallbackBlocked), the worker finishes only the
// records under way, sets the partitions back to their first record not handled, commits and
// lets the rebalance go on; the records it did not start are fetched by the partitions' next
// owners, from the committed offsets. Effects are never cut short by a rebalance or by Run's
// context: an effect longer than the group's rebalance timeout gets the member removed from
// the group, and its uncommitted records are handled again (as duplicates) by the new owners.
//
// # Concurrency
//
// One poll returns up to Options.MaxPollRecords records; the records of one partition are
// handled one at a time in offset order, different partitions concurrently. Add partitions and
// workers (members of the group) to handle more at once.
//
// # Testing
//
// The tests run the consumer/consumertest suite, and tests of commits, of a rebalance in the
// middle of a poll's records and of a crash between effect and commit, against a real
// Kafka-protocol broker: by default kfake (github.com/twmb/franz-go/pkg/kfake), an in-process
// implementation of the Kafka wire protocol and group coordinator that listens on 127.0.0.1 and
// to which the client talks over TCP like to any broker; with IDEM_KAFKA_BROKERS
// (comma-separated host:port), an external Kafka.
package kafka

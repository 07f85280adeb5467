// Package kinesis is a standalone consumer of an Amazon Kinesis data stream (outside Lambda,
// on aws-sdk-go-v2) that makes the effect of each business event happen once.
//
//	cps, err := dynamocheckpoints.New(dynamocheckpoints.Options{Client: db, Table: "idem_checkpoints", Application: "ledger"})
//	…
//	w, err := kinesis.Start(ctx, c, kinesis.Options{Client: client, Stream: "payments", Checkpoints: cps})
//	…
//	w.Stop()
//
// # Shards, order and checkpoints
//
// A Worker lists the stream's shards, claims its share of them (a lease in Checkpoints, renewed
// every third of Options.LeaseDuration and before each batch): the shards no worker of the
// application holds, and, when the others hold more than their share, one of the busiest
// worker's, which stops reading it before its next batch. It reads each shard in order from
// its checkpoint, handing every record to a consumer.Consumer. A record done with (processed
// now, or a duplicate) moves the shard's checkpoint past it; a record not done with (in flight
// elsewhere, or failed) stops the shard, which is read again from that record after a delay: no
// record of a shard is handled before the ones before it are done with. A rejected record (no
// key, a key reused for another fact) goes to Options.OnRejected and the checkpoint moves past
// it: a stream has no dead-letter queue. Stop gives the worker's leases up, so the others read
// its shards at once; a worker that dies leaves them when its leases run out.
//
// The effect of a record happens once because the consumer's idem store keeps its key; the
// checkpoints save work, and keep a restarted application from reading the stream again. A
// checkpoint behind (a worker killed between an effect and its checkpoint) makes a worker read
// records again, each a duplicate, one store round trip and no second effect. But
// NewMemoryCheckpoints lives and dies with the process: a restarted process reads every shard
// again from Options.Start, from TRIM_HORIZON the whole retention of the stream (24 hours by
// default, records whose keys the store may no longer keep, and whose effects then happen
// again) or from LATEST, skipping the records put while it was down. Keep the checkpoints in a
// table (consumer/dynamocheckpoints, consumer/pgcheckpoints) for any worker that restarts.
//
// # Resharding
//
// After a split or a merge, the parent shards are closed and their children receive the new
// records. A worker reads a child only once every parent the stream still lists is read to its
// end (its checkpoint is ShardEnd), so a partition key's records are handled in the order they
// were put, across the reshard.
//
// # Keys
//
// A sequence number is a place in the stream, not a fact: a producer that retries a PutRecord
// whose answer it lost writes the fact twice, under two sequence numbers. The consumer's key
// function reads the fact in the record's data (see Message).
//
// The repository's examples/consumer-kinesis is a complete service: payments booked into
// PostgreSQL in transaction mode, checkpoints in consumer/pgcheckpoints, a worker killed
// halfway.
package kinesis

// Package kinesis is a standalone consumer of an Amazon Kinesis data stream (outside Lambda,
// on aws-sdk-go-v2) that makes the effect of each business event happen once.
//
//	w, err := kinesis.Start(ctx, c, kinesis.Options{Client: client, Stream: "payments", Checkpoints: cps})
//	…
//	w.Stop()
//
// # Shards, order and checkpoints
//
// A Worker lists the stream's shards, claims the ones no other worker of the application holds
// (a lease in Checkpoints, renewed every third of Options.LeaseDuration) and reads each one in
// order from its checkpoint, handing every record to a consumer.Consumer. A record done with
// (processed now, or a duplicate) moves the shard's checkpoint past it; a record not done with
// (in flight elsewhere, or failed) stops the shard, which is read again from that record after
// a delay: no record of a shard is handled before the ones before it are done with. A rejected
// record (no key, a key reused for another fact) goes to Options.OnRejected and the checkpoint
// moves past it: a stream has no dead-letter queue.
//
// Checkpoints are where the work saved is kept, not where the guarantee lives: the effect of a
// record happens once because the consumer's idem store keeps its key, so a checkpoint lost or
// behind (a worker killed between an effect and its checkpoint, a process restarted with
// NewMemoryCheckpoints) only makes a worker read records again, each then a duplicate, one
// store round trip and no second effect. NewMemoryCheckpoints keeps them in the process; for
// workers in several processes, implement Checkpoints on a table they share.
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
package kinesis

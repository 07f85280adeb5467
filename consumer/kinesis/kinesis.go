package kinesis

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/consumer/internal/shards"
)

// Options configure a Worker. Client and Stream are required.
type Options struct {
	// Client is the Kinesis client. Required.
	Client *kinesis.Client
	// Stream is the stream's name. Required.
	Stream string
	// Checkpoints keep how far each shard is read, and which worker reads it. Workers of one
	// consumer application share one Checkpoints; two applications that each handle every
	// record (billing and shipping) each have their own. Default: NewMemoryCheckpoints(), this
	// worker's alone.
	Checkpoints Checkpoints
	// Start is where a shard without a checkpoint is read from: types.ShardIteratorTypeTrimHorizon
	// (the oldest record kept) or types.ShardIteratorTypeLatest (records put from now on).
	// Default TRIM_HORIZON.
	Start types.ShardIteratorType
	// Limit is the most records one GetRecords call returns. Default 100.
	Limit int32
	// PollInterval is how long a shard's reader waits after a GetRecords call that returned
	// nothing new (Kinesis allows five calls per second per shard). Default 1s.
	PollInterval time.Duration
	// LeaseDuration is how long a worker's claim on a shard lasts without renewal: a worker
	// that died leaves its shards to the others after it. Renewed every third of it. Default
	// 30s.
	LeaseDuration time.Duration
	// OnRejected, when set, is called with each record the consumer rejected (consumer.OutcomeRejected:
	// no key, a key reused for another fact, the handler's consumer.Reject), before the
	// checkpoint moves past it: a stream has no dead-letter queue, so this is where to keep it.
	// Default nil: the record is logged and passed.
	OnRejected func(ctx context.Context, m *consumer.Message, r consumer.Result)
	// Logger receives warnings. Default slog.Default().
	Logger *slog.Logger

	beforeAck func() bool // tests: true makes the worker behave as if killed before a checkpoint
}

// Checkpoints keep, per shard, how far a consumer application has read (the sequence number of
// the last record done with, or ShardEnd) and which worker reads it now (a lease), so that the
// workers of one application share the shards and a worker that stops or dies leaves its shards
// to the others.
//
// A checkpoint saves work, and keeps a restarted application from reading the stream again:
// the effect of each record happens once because the consumer's idem store keeps its key, but
// only as long as it keeps it. With NewMemoryCheckpoints (workers of one process share them)
// a restarted process reads each shard again from Options.Start: from TRIM_HORIZON every record
// the stream still holds, each a duplicate while the store keeps its key and run again once
// the key has expired; from LATEST, none of the records put while it was down. For workers
// that restart, or run in several processes, keep them in a table: consumer/dynamocheckpoints
// keeps them in DynamoDB, consumer/pgcheckpoints in PostgreSQL, or implement Checkpoints on a
// table of your own.
//
// Claim takes the lease of a shard for an owner until a time, or renews it, unless another
// owner holds it and its lease has not run out; it returns the shard's checkpoint ("" for
// none) and whether the owner holds the lease; a time in the past gives the lease up. Save
// sets the checkpoint if the owner holds the lease, never moving it back (see Later), and
// reports whether it held it. Checkpoint returns a shard's checkpoint, whoever holds it.
// Leases lists every shard's Lease. Take moves a shard's lease from the owner named to
// another, live or not: a worker holding fewer shards than its share takes one from the
// worker holding the most. Each must be atomic: two owners never hold one shard's lease.
type Checkpoints = shards.Checkpoints

// Lease is a shard's entry in Checkpoints: its checkpoint, and the worker that holds or last
// held its lease, until when.
type Lease = shards.Lease

// MemoryCheckpoints keep checkpoints and leases in the process's memory. Create them with
// NewMemoryCheckpoints; they are safe for concurrent use.
type MemoryCheckpoints = shards.MemoryCheckpoints

// NewMemoryCheckpoints returns empty checkpoints kept in memory.
func NewMemoryCheckpoints() *MemoryCheckpoints { return shards.NewMemoryCheckpoints() }

// ShardEnd is the checkpoint of a shard read to its end (a parent shard after a reshard): its
// children may be read.
const ShardEnd = shards.ShardEnd

// Later reports whether checkpoint a is past checkpoint b: ShardEnd is past every sequence
// number, every sequence number is past "" (none), and sequence numbers compare as numbers.
func Later(a, b string) bool { return shards.Later(a, b) }

// Worker reads every shard of a stream it holds the lease of, in order, and hands each record
// to a consumer. Create it with Start; it is safe for concurrent use.
type Worker struct{ w *shards.Worker }

// Start starts a worker that reads the stream and hands each record to c, until Stop (or
// ctx's end). It fails with an error matching idem.ErrInvalidInput, naming the field, if an
// option is invalid.
//
// Each shard is read in order, from its checkpoint on. A record done with (consumer.OutcomeExecuted
// or consumer.OutcomeReplay) moves the checkpoint past it; a rejected one too, after OnRejected. A
// record not done with (consumer.OutcomeInFlight, consumer.OutcomeFailed) stops its shard: after the
// Result's RetryAfter (at least PollInterval) the shard is read again from that record, so no
// record of a shard is handled before the ones before it are done with. A shard that was split
// or merged (resharding) is read to its end before its children are read, so a partition key's
// records are handled in the order they were put, across the reshard.
func Start(ctx context.Context, c *consumer.Consumer, opt Options) (*Worker, error) {
	common := shards.Options{Name: opt.Stream, Checkpoints: opt.Checkpoints, Start: string(opt.Start), Limit: opt.Limit,
		PollInterval: opt.PollInterval, LeaseDuration: opt.LeaseDuration, OnRejected: opt.OnRejected, Logger: opt.Logger, BeforeAck: opt.beforeAck}
	switch {
	case c == nil:
		return nil, &idem.OptionError{Package: "kinesis", Field: "consumer", Problem: "is nil"}
	case opt.Client == nil:
		return nil, &idem.OptionError{Package: "kinesis", Field: "Options.Client", Problem: "is required"}
	case opt.Stream == "":
		return nil, &idem.OptionError{Package: "kinesis", Field: "Options.Stream", Problem: "is required"}
	}
	if err := common.Check("kinesis"); err != nil {
		return nil, err
	}
	common = common.WithDefaults()
	src := &source{client: opt.Client, stream: opt.Stream, start: types.ShardIteratorType(common.Start), limit: common.Limit}
	w := shards.Start(ctx, c, src, common)
	return &Worker{w: w}, nil
}

// Stop stops the worker: it takes no new record, finishes the ones under way (and saves their
// checkpoints), gives up its leases, so that the other workers read its shards at once, and
// returns when it has stopped.
func (w *Worker) Stop() { w.w.Stop() }

// Kill stops the worker as a process killed at that instant: no checkpoint is saved from now
// on, and it returns without waiting for the record under way. Its leases run out after
// LeaseDuration, and another worker reads on from the last checkpoint saved.
func (w *Worker) Kill() { w.w.Kill() }

// Done is closed when the worker has stopped.
func (w *Worker) Done() <-chan struct{} { return w.w.Done() }

// source is the Kinesis API as a shards.Source.
type source struct {
	client *kinesis.Client
	stream string
	start  types.ShardIteratorType
	limit  int32
}

func (s *source) Shards(ctx context.Context) ([]shards.Shard, error) {
	var out []shards.Shard
	in := &kinesis.ListShardsInput{StreamName: aws.String(s.stream)}
	for {
		resp, err := s.client.ListShards(ctx, in)
		if err != nil {
			return nil, err
		}
		for _, sh := range resp.Shards {
			out = append(out, shards.Shard{ID: aws.ToString(sh.ShardId),
				Parents: []string{aws.ToString(sh.ParentShardId), aws.ToString(sh.AdjacentParentShardId)}})
		}
		if resp.NextToken == nil {
			return out, nil
		}
		in = &kinesis.ListShardsInput{NextToken: resp.NextToken}
	}
}

func (s *source) Iterator(ctx context.Context, shard string, pos shards.Position) (string, error) {
	in := &kinesis.GetShardIteratorInput{StreamName: aws.String(s.stream), ShardId: aws.String(shard)}
	switch {
	case pos.At != "":
		in.ShardIteratorType, in.StartingSequenceNumber = types.ShardIteratorTypeAtSequenceNumber, aws.String(pos.At)
	case pos.After != "":
		in.ShardIteratorType, in.StartingSequenceNumber = types.ShardIteratorTypeAfterSequenceNumber, aws.String(pos.After)
	default:
		in.ShardIteratorType = s.start
	}
	resp, err := s.client.GetShardIterator(ctx, in)
	if err != nil {
		return "", err
	}
	if resp.ShardIterator == nil {
		return "", errors.New("kinesis: no shard iterator")
	}
	return *resp.ShardIterator, nil
}

func (s *source) Read(ctx context.Context, shard, iter string) (shards.Batch, error) {
	resp, err := s.client.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: aws.String(iter), Limit: aws.Int32(s.limit)})
	if err != nil {
		return shards.Batch{}, err
	}
	b := shards.Batch{Next: aws.ToString(resp.NextShardIterator), Behind: aws.ToInt64(resp.MillisBehindLatest) > 0}
	for _, r := range resp.Records {
		b.Records = append(b.Records, shards.Record{Seq: aws.ToString(r.SequenceNumber), Msg: Message(r, s.stream, shard)})
	}
	return b, nil
}

// Message converts a Kinesis record into the message a consumer handles: its Body is the
// record's data, its ID the sequence number (for logs only), its Subject the stream's name, and
// its Header "partition-key", "sequence-number" and "shard-id". A sequence number is a place in
// the stream, not a fact: a producer that retries a PutRecord whose answer it lost writes the
// fact twice. Key the fact from the data.
func Message(r types.Record, stream, shard string) *consumer.Message {
	return &consumer.Message{
		Body:    r.Data,
		ID:      aws.ToString(r.SequenceNumber),
		Subject: stream,
		Header: map[string][]string{
			"partition-key":   {aws.ToString(r.PartitionKey)},
			"sequence-number": {aws.ToString(r.SequenceNumber)},
			"shard-id":        {shard},
		},
	}
}

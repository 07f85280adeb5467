// Package dynamostream is a standalone consumer of a DynamoDB table's stream (outside Lambda, on
// aws-sdk-go-v2) that makes the effect of each change happen once: write the business item and
// the event announcing it in one transaction, and consume the stream idempotently.
//
//	w, err := dynamostream.Start(ctx, c, dynamostream.Options{Client: streams, StreamARN: arn})
//	…
//	w.Stop()
//
// # Messages and keys
//
// Each stream record becomes a consumer.Message (see Message) whose body is the change as plain
// JSON: {"event_name": "INSERT", "keys": {…}, "new_image": {…}, "old_image": {…}}, the attribute
// values without their type tags. A stream holds each change of an item once, but a writer
// that retries a write whose answer it lost can make two changes of one fact; the consumer's
// key names the fact (the event id the writer put in the item), never the record's sequence
// number or event id.
//
// # Shards, order and checkpoints
//
// As consumer/kinesis does: workers share the shards by lease (kinesis.Checkpoints, which this
// package takes too; consumer/dynamocheckpoints keeps them in a DynamoDB table), read each
// shard in order from its checkpoint, stop a shard at a record not done with and read it again
// from there after a delay, and read a parent shard to its end before its children (DynamoDB
// closes a stream's shards every few hours and opens children). Stop gives the worker's leases
// up. The idem store keeps each effect once, so a checkpoint behind costs duplicates; but
// checkpoints kept in memory are lost with the process, and a restarted one reads the stream
// again from Options.Start: the last 24 hours of changes from TRIM_HORIZON (effects happen again
// for keys the store no longer keeps), none of those made while it was down from LATEST.
//
// The repository's examples/consumer-dynamostream is a complete program: a payment and its
// event written in one transaction, and each receipt sent once from the table's stream.
package dynamostream

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/consumer/internal/shards"
)

// Options configure a Worker. Client and StreamARN are required.
type Options struct {
	// Client is the DynamoDB Streams client. Required.
	Client *dynamodbstreams.Client
	// StreamARN is the table's stream (the table's LatestStreamArn). Required.
	StreamARN string
	// Checkpoints keep how far each shard is read, and which worker reads it; workers of one
	// application share one. Default: NewMemoryCheckpoints(), this worker's alone.
	Checkpoints Checkpoints
	// Message converts a record into the message the consumer handles. Default Message (the
	// whole change); set it to hand the handler one attribute of the item, an outbox event's
	// payload for example.
	Message func(r types.Record, shard string) *consumer.Message
	// Start is where a shard without a checkpoint is read from: TRIM_HORIZON (the last 24 hours
	// of changes) or LATEST. Default TRIM_HORIZON.
	Start types.ShardIteratorType
	// Limit is the most records one GetRecords call returns. Default 100.
	Limit int32
	// PollInterval is how long a shard's reader waits after a read that returned nothing.
	// Default 1s.
	PollInterval time.Duration
	// LeaseDuration is how long a worker's claim on a shard lasts without renewal. Default 30s.
	LeaseDuration time.Duration
	// OnRejected, when set, is called with each record the consumer rejected, before the
	// checkpoint moves past it. Default nil: the record is logged and passed.
	OnRejected func(ctx context.Context, m *consumer.Message, r consumer.Result)
	// Logger receives warnings. Default slog.Default().
	Logger *slog.Logger

	beforeAck func() bool // tests: true makes the worker behave as if killed before a checkpoint
}

// Checkpoints keep, per shard, how far an application has read and which worker reads it now;
// they only save work (see the package doc). It is the interface of consumer/kinesis's
// Checkpoints: Claim, Save, Checkpoint, Leases and Take.
type Checkpoints = shards.Checkpoints

// Lease is a shard's entry in Checkpoints: its checkpoint, and the worker that holds or last
// held its lease, until when.
type Lease = shards.Lease

// NewMemoryCheckpoints returns empty checkpoints kept in the process's memory.
func NewMemoryCheckpoints() *shards.MemoryCheckpoints { return shards.NewMemoryCheckpoints() }

// ShardEnd is the checkpoint of a shard read to its end.
const ShardEnd = shards.ShardEnd

// Worker reads the stream's shards it holds the lease of. Create it with Start.
type Worker struct{ w *shards.Worker }

// Start starts a worker that reads the stream and hands each record to c, until Stop (or ctx's
// end). It fails with an error matching idem.ErrInvalidInput, naming the field, if an option is
// invalid. Records are handled as consumer/kinesis's Start handles them (see there).
func Start(ctx context.Context, c *consumer.Consumer, opt Options) (*Worker, error) {
	common := shards.Options{Name: opt.StreamARN, Checkpoints: opt.Checkpoints, Start: string(opt.Start), Limit: opt.Limit,
		PollInterval: opt.PollInterval, LeaseDuration: opt.LeaseDuration, OnRejected: opt.OnRejected, Logger: opt.Logger, BeforeAck: opt.beforeAck}
	switch {
	case c == nil:
		return nil, &idem.OptionError{Package: "dynamostream", Field: "consumer", Problem: "is nil"}
	case opt.Client == nil:
		return nil, &idem.OptionError{Package: "dynamostream", Field: "Options.Client", Problem: "is required"}
	case opt.StreamARN == "":
		return nil, &idem.OptionError{Package: "dynamostream", Field: "Options.StreamARN", Problem: "is required"}
	}
	if err := common.Check("dynamostream"); err != nil {
		return nil, err
	}
	common = common.WithDefaults()
	src := &source{client: opt.Client, arn: opt.StreamARN, start: types.ShardIteratorType(common.Start), limit: common.Limit, message: opt.Message}
	if src.message == nil {
		src.message = Message
	}
	w := shards.Start(ctx, c, src, common)
	return &Worker{w: w}, nil
}

// Stop stops the worker: it takes no new record, finishes the ones under way (and saves their
// checkpoints), gives up its leases, so that the other workers read its shards at once, and
// returns when it has stopped.
func (w *Worker) Stop() { w.w.Stop() }

// Kill stops the worker as a process killed at that instant: no checkpoint is saved from now
// on, and it returns without waiting for the record under way.
func (w *Worker) Kill() { w.w.Kill() }

// Done is closed when the worker has stopped.
func (w *Worker) Done() <-chan struct{} { return w.w.Done() }

// source is the DynamoDB Streams API as a shards.Source.
type source struct {
	client *dynamodbstreams.Client
	arn    string
	start  types.ShardIteratorType
	limit  int32

	message func(types.Record, string) *consumer.Message
}

func (s *source) Shards(ctx context.Context) ([]shards.Shard, error) {
	var out []shards.Shard
	in := &dynamodbstreams.DescribeStreamInput{StreamArn: aws.String(s.arn)}
	for {
		resp, err := s.client.DescribeStream(ctx, in)
		if err != nil {
			return nil, err
		}
		if resp.StreamDescription == nil {
			return out, nil
		}
		for _, sh := range resp.StreamDescription.Shards {
			out = append(out, shards.Shard{ID: aws.ToString(sh.ShardId), Parents: []string{aws.ToString(sh.ParentShardId)}})
		}
		if resp.StreamDescription.LastEvaluatedShardId == nil {
			return out, nil
		}
		in = &dynamodbstreams.DescribeStreamInput{StreamArn: aws.String(s.arn), ExclusiveStartShardId: resp.StreamDescription.LastEvaluatedShardId}
	}
}

func (s *source) Iterator(ctx context.Context, shard string, pos shards.Position) (string, error) {
	in := &dynamodbstreams.GetShardIteratorInput{StreamArn: aws.String(s.arn), ShardId: aws.String(shard)}
	switch {
	case pos.At != "":
		in.ShardIteratorType, in.SequenceNumber = types.ShardIteratorTypeAtSequenceNumber, aws.String(pos.At)
	case pos.After != "":
		in.ShardIteratorType, in.SequenceNumber = types.ShardIteratorTypeAfterSequenceNumber, aws.String(pos.After)
	default:
		in.ShardIteratorType = s.start
	}
	resp, err := s.client.GetShardIterator(ctx, in)
	if err != nil {
		return "", err
	}
	if resp.ShardIterator == nil {
		return "", errors.New("dynamostream: no shard iterator")
	}
	return *resp.ShardIterator, nil
}

func (s *source) Read(ctx context.Context, shard, iter string) (shards.Batch, error) {
	resp, err := s.client.GetRecords(ctx, &dynamodbstreams.GetRecordsInput{ShardIterator: aws.String(iter), Limit: aws.Int32(s.limit)})
	if err != nil {
		return shards.Batch{}, err
	}
	b := shards.Batch{Next: aws.ToString(resp.NextShardIterator), Behind: len(resp.Records) == int(s.limit)}
	for _, r := range resp.Records {
		var seq string
		if r.Dynamodb != nil {
			seq = aws.ToString(r.Dynamodb.SequenceNumber)
		}
		m := s.message(r, shard)
		if m != nil && m.Subject == "" {
			m.Subject = tableName(s.arn) // where it came from, for operators
		}
		b.Records = append(b.Records, shards.Record{Seq: seq, Msg: m})
	}
	return b, nil
}

// Message converts a stream record into the message a consumer handles: its Body is the change
// as plain JSON ({"event_name", "keys", "new_image", "old_image"}, the images the stream's view
// type carries; a number is a JSON number, a set an array, binary data base64), its ID the
// record's sequence number (for logs only), and its Header "event-name", "sequence-number",
// "event-id" and "shard-id". The body has the shape of idemlambda.DynamoDBMessage's, so one
// key function serves a Lambda function and a long-running consumer of the same stream.
func Message(r types.Record, shard string) *consumer.Message {
	var seq string
	ch := change{EventName: string(r.EventName)}
	if d := r.Dynamodb; d != nil {
		seq = aws.ToString(d.SequenceNumber)
		ch.Keys, ch.NewImage, ch.OldImage = plainItem(d.Keys), plainItem(d.NewImage), plainItem(d.OldImage)
	}
	body, _ := json.Marshal(ch) // plain values only: cannot fail
	return &consumer.Message{
		Body: body,
		ID:   seq,
		Header: map[string][]string{
			"event-name":      {string(r.EventName)},
			"sequence-number": {seq},
			"event-id":        {aws.ToString(r.EventID)},
			"shard-id":        {shard},
		},
	}
}

// change is the body of a message.
type change struct {
	EventName string         `json:"event_name"`
	Keys      map[string]any `json:"keys,omitempty"`
	NewImage  map[string]any `json:"new_image,omitempty"`
	OldImage  map[string]any `json:"old_image,omitempty"`
}

func plainItem(item map[string]types.AttributeValue) map[string]any {
	if len(item) == 0 {
		return nil
	}
	out := make(map[string]any, len(item))
	for k, v := range item {
		out[k] = plain(v)
	}
	return out
}

// plain is an attribute value without its type tag.
func plain(v types.AttributeValue) any {
	switch x := v.(type) {
	case *types.AttributeValueMemberS:
		return x.Value
	case *types.AttributeValueMemberN:
		return json.Number(x.Value)
	case *types.AttributeValueMemberBOOL:
		return x.Value
	case *types.AttributeValueMemberB:
		return x.Value
	case *types.AttributeValueMemberSS:
		return x.Value
	case *types.AttributeValueMemberNS:
		out := make([]json.Number, len(x.Value))
		for i, n := range x.Value {
			out[i] = json.Number(n)
		}
		return out
	case *types.AttributeValueMemberBS:
		return x.Value
	case *types.AttributeValueMemberL:
		out := make([]any, len(x.Value))
		for i, e := range x.Value {
			out[i] = plain(e)
		}
		return out
	case *types.AttributeValueMemberM:
		return plainItem(x.Value)
	}
	return nil // NULL
}

// tableName is the table's name in a stream ARN ("arn:aws:dynamodb:…:table/orders/stream/…").
func tableName(arn string) string {
	_, rest, ok := strings.Cut(arn, ":table/")
	if !ok {
		return ""
	}
	name, _, _ := strings.Cut(rest, "/")
	return name
}

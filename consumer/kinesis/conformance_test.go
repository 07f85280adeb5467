package kinesis_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awskinesis "github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/consumer/consumertest"
	"github.com/idemkit/idem/consumer/kinesis"
)

// lease is the conformance workers' lease: how long a killed worker's shards wait before
// another worker reads on from their checkpoints.
const lease = 1500 * time.Millisecond

// broker makes a fresh four-shard stream on kinesalite for each test.
type broker struct{}

func (broker) NewQueue(t testing.TB) consumertest.Queue {
	t.Helper()
	client := kinesisClient(t)
	return &queue{client: client, stream: newStream(t, client, 4), groups: map[string]*kinesis.MemoryCheckpoints{}}
}

// queue is one stream; each consumer scope is an application with checkpoints of its own.
type queue struct {
	client *awskinesis.Client
	stream string
	mu     sync.Mutex
	groups map[string]*kinesis.MemoryCheckpoints
}

func (q *queue) Publish(ctx context.Context, body []byte) error {
	_, err := q.client.PutRecord(ctx, &awskinesis.PutRecordInput{StreamName: aws.String(q.stream), Data: body, PartitionKey: aws.String(randHex(8))})
	return err
}

func (q *queue) checkpoints(scope string) *kinesis.MemoryCheckpoints {
	q.mu.Lock()
	defer q.mu.Unlock()
	cp := q.groups[scope]
	if cp == nil {
		cp = kinesis.NewMemoryCheckpoints()
		q.groups[scope] = cp
	}
	return cp
}

func (q *queue) Start(ctx context.Context, c *consumer.Consumer, crash func() bool) (consumertest.Worker, error) {
	opt := kinesis.WithBeforeAck(kinesis.Options{Client: q.client, Stream: q.stream, Checkpoints: q.checkpoints(c.Options().Scope),
		PollInterval: 100 * time.Millisecond, LeaseDuration: lease, Logger: quiet()}, func() bool { return crash != nil && crash() })
	return kinesis.Start(ctx, c, opt)
}

// Pending counts, for the application that is furthest behind, the records past its
// checkpoints.
func (q *queue) Pending(ctx context.Context) (int, error) {
	q.mu.Lock()
	groups := make([]*kinesis.MemoryCheckpoints, 0, len(q.groups))
	for _, g := range q.groups {
		groups = append(groups, g)
	}
	q.mu.Unlock()
	if len(groups) == 0 {
		groups = append(groups, kinesis.NewMemoryCheckpoints())
	}
	most := 0
	for _, g := range groups {
		n, err := q.pastCheckpoints(ctx, g)
		if err != nil {
			return 0, err
		}
		most = max(most, n)
	}
	return most, nil
}

func (q *queue) pastCheckpoints(ctx context.Context, g *kinesis.MemoryCheckpoints) (int, error) {
	shards, err := q.client.ListShards(ctx, &awskinesis.ListShardsInput{StreamName: aws.String(q.stream)})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, s := range shards.Shards {
		cp, _ := g.Checkpoint(ctx, aws.ToString(s.ShardId))
		if cp == kinesis.ShardEnd {
			continue
		}
		in := &awskinesis.GetShardIteratorInput{StreamName: aws.String(q.stream), ShardId: s.ShardId, ShardIteratorType: types.ShardIteratorTypeTrimHorizon}
		if cp != "" {
			in.ShardIteratorType, in.StartingSequenceNumber = types.ShardIteratorTypeAfterSequenceNumber, aws.String(cp)
		}
		it, err := q.client.GetShardIterator(ctx, in)
		if err != nil {
			return 0, err
		}
		for iter := it.ShardIterator; iter != nil; {
			resp, err := q.client.GetRecords(ctx, &awskinesis.GetRecordsInput{ShardIterator: iter})
			if err != nil {
				return 0, err
			}
			n += len(resp.Records)
			if len(resp.Records) == 0 {
				break
			}
			iter = resp.NextShardIterator
		}
	}
	return n, nil
}

// The consumer conformance suite on kinesalite: duplicates, crashes between effect and
// checkpoint, failures, a kill mid-effect, rejected records, scopes apart.
func TestConformance(t *testing.T) {
	consumertest.Run(t, broker{}, consumertest.Options{Redelivery: 2 * lease, Timeout: 3 * time.Minute})
}

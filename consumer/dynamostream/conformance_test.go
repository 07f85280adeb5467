package dynamostream_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"

	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/consumer/consumertest"
	"github.com/idemkit/idem/consumer/dynamostream"
)

const lease = 1500 * time.Millisecond

// broker makes a fresh table with a stream for each test; publishing is writing an item whose
// "body" attribute is the message, and the workers hand that attribute to the consumer.
type broker struct{}

func (broker) NewQueue(t testing.TB) consumertest.Queue {
	t.Helper()
	return &queue{b: setup(t), groups: map[string]dynamostream.Checkpoints{}}
}

type queue struct {
	b      *bundle
	mu     sync.Mutex
	groups map[string]dynamostream.Checkpoints
}

func (q *queue) Publish(ctx context.Context, body []byte) error {
	_, err := q.b.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(q.b.table), Item: map[string]ddbtypes.AttributeValue{
		"pk": &ddbtypes.AttributeValueMemberS{Value: "msg#" + randHex(8)}, "sk": &ddbtypes.AttributeValueMemberS{Value: "msg"},
		"body": &ddbtypes.AttributeValueMemberS{Value: string(body)},
	}})
	return err
}

func (q *queue) checkpoints(scope string) dynamostream.Checkpoints {
	q.mu.Lock()
	defer q.mu.Unlock()
	cp := q.groups[scope]
	if cp == nil {
		cp = dynamostream.NewMemoryCheckpoints()
		q.groups[scope] = cp
	}
	return cp
}

// bodyAttribute hands the consumer the item's "body" attribute.
func bodyAttribute(r types.Record, shard string) *consumer.Message {
	m := dynamostream.Message(r, shard)
	if r.Dynamodb != nil {
		if s, ok := r.Dynamodb.NewImage["body"].(*types.AttributeValueMemberS); ok {
			m.Body = []byte(s.Value)
		}
	}
	return m
}

func (q *queue) Start(ctx context.Context, c *consumer.Consumer, crash func() bool) (consumertest.Worker, error) {
	opt := dynamostream.WithBeforeAck(dynamostream.Options{Client: q.b.streams, StreamARN: q.b.arn, Checkpoints: q.checkpoints(c.Options().Scope),
		Message: bodyAttribute, PollInterval: 100 * time.Millisecond, LeaseDuration: lease, Logger: quiet()},
		func() bool { return crash != nil && crash() })
	return dynamostream.Start(ctx, c, opt)
}

// Pending counts, for the application furthest behind, the records past its checkpoints.
func (q *queue) Pending(ctx context.Context) (int, error) {
	q.mu.Lock()
	groups := make([]dynamostream.Checkpoints, 0, len(q.groups))
	for _, g := range q.groups {
		groups = append(groups, g)
	}
	q.mu.Unlock()
	if len(groups) == 0 {
		groups = append(groups, dynamostream.NewMemoryCheckpoints())
	}
	most := 0
	for _, g := range groups {
		n, err := q.past(ctx, g)
		if err != nil {
			return 0, err
		}
		most = max(most, n)
	}
	return most, nil
}

func (q *queue) past(ctx context.Context, g dynamostream.Checkpoints) (int, error) {
	d, err := q.b.streams.DescribeStream(ctx, &dynamodbstreams.DescribeStreamInput{StreamArn: aws.String(q.b.arn)})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, s := range d.StreamDescription.Shards {
		cp, _ := g.Checkpoint(ctx, aws.ToString(s.ShardId))
		if cp == dynamostream.ShardEnd {
			continue
		}
		in := &dynamodbstreams.GetShardIteratorInput{StreamArn: aws.String(q.b.arn), ShardId: s.ShardId, ShardIteratorType: types.ShardIteratorTypeTrimHorizon}
		if cp != "" {
			in.ShardIteratorType, in.SequenceNumber = types.ShardIteratorTypeAfterSequenceNumber, aws.String(cp)
		}
		it, err := q.b.streams.GetShardIterator(ctx, in)
		if err != nil {
			return 0, err
		}
		for iter := it.ShardIterator; iter != nil; {
			resp, err := q.b.streams.GetRecords(ctx, &dynamodbstreams.GetRecordsInput{ShardIterator: iter})
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

// The consumer conformance suite on DynamoDB Local's stream.
func TestConformance(t *testing.T) {
	consumertest.Run(t, broker{}, consumertest.Options{Redelivery: 2 * lease, Timeout: 3 * time.Minute})
}

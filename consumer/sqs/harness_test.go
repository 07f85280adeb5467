package sqs_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	snstypes "github.com/aws/aws-sdk-go-v2/service/sns/types"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/consumer/sqs"
	"github.com/idemkit/idem/internal/testenv"
)

// sqsEndpoint returns IDEM_SQS_ENDPOINT (default http://127.0.0.1:4566, the fauxqs server that
// scripts/services.d/40-fauxqs.sh starts), or skips/fails the test when it is not reachable.
func sqsEndpoint(t testing.TB) string {
	return testenv.Service(t, "SQS/SNS (fauxqs)", "IDEM_SQS_ENDPOINT", "http://127.0.0.1:4566", testenv.HostPort("4566"))
}

// bundle is what a test against real services gets: SQS and SNS clients on fauxqs, and a
// PostgreSQL table of its own in which effects are counted.
type bundle struct {
	sqs    *awssqs.Client
	sns    *sns.Client
	pg     *pgxpool.Pool
	table  string // effects: one row per execution of an effect
	prefix string // unique name prefix for this test's queues and topics
}

func setup(t testing.TB) *bundle {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test (SQS and PostgreSQL); skipped with -short")
	}
	endpoint := sqsEndpoint(t)
	b := setupPG(t)
	cfg := sqs.Config(sqs.ConfigOptions{Endpoint: endpoint})
	b.sqs = awssqs.NewFromConfig(cfg)
	b.sns = sns.NewFromConfig(cfg)
	return b
}

// setupPG is setup without SQS: only the effects table.
func setupPG(t testing.TB) *bundle {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test (PostgreSQL); skipped with -short")
	}
	pgURL := testenv.PostgresURL(t)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pgURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	b := &bundle{pg: pool, prefix: "t" + randHex(6)}
	b.table = "sqs_effects_" + b.prefix
	if _, err := pool.Exec(ctx, `CREATE TABLE `+b.table+` (key text NOT NULL, queue text NOT NULL, at timestamptz NOT NULL DEFAULT now())`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), `DROP TABLE IF EXISTS `+b.table) })
	return b
}

func randHex(n int) string {
	p := make([]byte, n)
	_, _ = rand.Read(p)
	return hex.EncodeToString(p)
}

// queue creates a queue named for this test and returns its URL and ARN.
func (b *bundle) queue(t testing.TB, name string, attrs map[string]string) (url, arn string) {
	t.Helper()
	ctx := context.Background()
	out, err := b.sqs.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String(b.prefix + "-" + name), Attributes: attrs})
	if err != nil {
		t.Fatal(err)
	}
	url = *out.QueueUrl
	t.Cleanup(func() {
		_, _ = b.sqs.DeleteQueue(context.Background(), &awssqs.DeleteQueueInput{QueueUrl: aws.String(url)})
	})
	at, err := b.sqs.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{QueueUrl: out.QueueUrl,
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn}})
	if err != nil {
		t.Fatal(err)
	}
	return url, at.Attributes["QueueArn"]
}

// topic creates an SNS topic and subscribes the queues to it; raw[i] sets raw message delivery
// for queueARNs[i].
func (b *bundle) topic(t testing.TB, name string, queueARNs []string, raw []bool) string {
	t.Helper()
	ctx := context.Background()
	out, err := b.sns.CreateTopic(ctx, &sns.CreateTopicInput{Name: aws.String(b.prefix + "-" + name)})
	if err != nil {
		t.Fatal(err)
	}
	arn := *out.TopicArn
	t.Cleanup(func() {
		_, _ = b.sns.DeleteTopic(context.Background(), &sns.DeleteTopicInput{TopicArn: aws.String(arn)})
	})
	for i, q := range queueARNs {
		_, err := b.sns.Subscribe(ctx, &sns.SubscribeInput{TopicArn: aws.String(arn), Protocol: aws.String("sqs"),
			Endpoint: aws.String(q), Attributes: map[string]string{"RawMessageDelivery": strconv.FormatBool(raw[i])}})
		if err != nil {
			t.Fatal(err)
		}
	}
	return arn
}

// publish publishes body to the topic, as a producer that retries would: each call is a new SNS
// message with its own id.
func (b *bundle) publish(t testing.TB, topicARN, body string) {
	t.Helper()
	_, err := b.sns.Publish(context.Background(), &sns.PublishInput{TopicArn: aws.String(topicARN), Message: aws.String(body),
		MessageAttributes: map[string]snstypes.MessageAttributeValue{"source": {DataType: aws.String("String"), StringValue: aws.String("test")}}})
	if err != nil {
		t.Fatal(err)
	}
}

// send sends bodies to the queue in batches of 10; each send gets a fresh SQS message id.
func (b *bundle) send(t testing.TB, url string, bodies []string) {
	t.Helper()
	for len(bodies) > 0 {
		n := min(len(bodies), 10)
		var entries []types.SendMessageBatchRequestEntry
		for i, body := range bodies[:n] {
			entries = append(entries, types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), MessageBody: aws.String(body)})
		}
		out, err := b.sqs.SendMessageBatch(context.Background(), &awssqs.SendMessageBatchInput{QueueUrl: aws.String(url), Entries: entries})
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Failed) > 0 {
			t.Fatalf("send: %d failed: %v", len(out.Failed), *out.Failed[0].Message)
		}
		bodies = bodies[n:]
	}
}

// pending returns the messages of the queue that are visible, hidden or delayed.
func (b *bundle) pending(t testing.TB, url string) int {
	t.Helper()
	n, err := b.pendingErr(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func (b *bundle) pendingErr(ctx context.Context, url string) (int, error) {
	at, err := b.sqs.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{QueueUrl: aws.String(url),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessages,
			types.QueueAttributeNameApproximateNumberOfMessagesNotVisible, types.QueueAttributeNameApproximateNumberOfMessagesDelayed}})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, v := range at.Attributes {
		i, err := strconv.Atoi(v)
		if err != nil {
			return 0, err
		}
		n += i
	}
	return n, nil
}

// effect records one execution of the effect for key, seen on queue.
func (b *bundle) effect(ctx context.Context, key, queue string) error {
	_, err := b.pg.Exec(ctx, `INSERT INTO `+b.table+` (key, queue) VALUES ($1, $2)`, key, queue)
	return err
}

// counts returns how many times the effect ran per key.
func (b *bundle) counts(t testing.TB) map[string]int {
	t.Helper()
	rows, err := b.pg.Query(context.Background(), `SELECT key, count(*) FROM `+b.table+` GROUP BY key`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	m := map[string]int{}
	for rows.Next() {
		var k string
		var n int
		if err := rows.Scan(&k, &n); err != nil {
			t.Fatal(err)
		}
		m[k] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return m
}

// eventually polls cond every 50ms until it holds or d passes.
func eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// order is the business event of the tests: its id is the idempotency key.
type order struct {
	ID    string `json:"order"`
	Cents int    `json:"cents"`
}

func orderBody(id string, cents int) string {
	b, _ := json.Marshal(order{ID: id, Cents: cents})
	return string(b)
}

// orderKey derives the idempotency key from the business fact, never from a transport id.
func orderKey(m *consumer.Message) (string, error) {
	var o order
	if err := json.Unmarshal(m.Body, &o); err != nil {
		return "", fmt.Errorf("not an order: %w", err)
	}
	if o.ID == "" {
		return "", fmt.Errorf("order without id")
	}
	return "order/" + o.ID, nil
}

// newConsumer returns a consumer keyed on the order id, in scope, whose handler runs effect with
// the scoped key; observe, when given, sees every Result.
func newConsumer(t testing.TB, r consumer.Runner, scope string, effect func(ctx context.Context, key string, m *consumer.Message) error,
	observe ...func(*consumer.Message, consumer.Result)) *consumer.Consumer {
	t.Helper()
	opt := consumer.Options{Key: orderKey, Scope: scope, Logger: quiet()}
	if len(observe) > 0 {
		opt.OnEvent = func(ev consumer.Event) { observe[0](ev.Message, ev.Result) }
	}
	opt.Runner = r
	c, err := consumer.New(opt, func(ctx context.Context, m *consumer.Message) ([]byte, error) {
		key, err := orderKey(m)
		if err != nil {
			return nil, err
		}
		return nil, effect(ctx, scope+"/"+key, m)
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

//go:build chaos

package consumerchaos_test

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem/consumer/sqs"
	"github.com/idemkit/idem/internal/testenv"
)

// broker is one real broker, with a stream or queue of the run's own.
type broker interface {
	// Addr is the broker's host:port, for the relay.
	Addr() string
	// URL is the URL workers dial to reach the broker through the relay at relay.
	URL(relay string) string
	// Target names the stream (NATS) or queue (AMQP) workers consume.
	Target() string
	// Publish publishes body with a message id of its own.
	Publish(ctx context.Context, body []byte, msgID string) error
	// Pending is how many messages the broker still holds: ready, or delivered and unacked
	// when the broker says (JetStream does; AMQP counts unacked ones once their channel closed).
	Pending(ctx context.Context) (int, error)
}

func withHost(raw, host string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	u.Host = host
	return u.String()
}

type natsBroker struct {
	url, stream, subject string
	js                   jetstream.JetStream
}

func newNATS(t *testing.T, id string) broker {
	raw := testenv.NATSURL(t)
	if raw == "" {
		return nil
	}
	nc, err := nats.Connect(raw)
	if err != nil {
		t.Fatalf("connect NATS: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	b := &natsBroker{url: raw, js: js, stream: "CCHAOS_" + id, subject: "cchaos." + id}
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: b.stream, Subjects: []string{b.subject}, Storage: jetstream.FileStorage}); err != nil {
		t.Fatalf("create stream: %v", err)
	}
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), b.stream) })
	if _, err := js.CreateOrUpdateConsumer(ctx, b.stream, jetstream.ConsumerConfig{
		Durable: "work", AckPolicy: jetstream.AckExplicitPolicy, AckWait: natsAckWait, MaxAckPending: 1000, MaxDeliver: -1,
	}); err != nil {
		t.Fatalf("create consumer: %v", err)
	}
	return b
}

func (b *natsBroker) Addr() string            { return hostPort(b.url, "4222") }
func (b *natsBroker) URL(relay string) string { return withHost(b.url, relay) }
func (b *natsBroker) Target() string          { return b.stream }

func (b *natsBroker) Publish(ctx context.Context, body []byte, msgID string) error {
	_, err := b.js.Publish(ctx, b.subject, body, jetstream.WithMsgID(msgID))
	return err
}

func (b *natsBroker) Pending(ctx context.Context) (int, error) {
	cons, err := b.js.Consumer(ctx, b.stream, "work")
	if err != nil {
		return 0, err
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return 0, err
	}
	return int(info.NumPending) + info.NumAckPending, nil
}

type amqpBroker struct {
	url, queue string
	pub, adm   *amqp091.Channel
}

func newAMQP(t *testing.T, id string) broker {
	raw := testenv.AMQPURL(t)
	if raw == "" {
		return nil
	}
	conn, err := amqp091.Dial(raw)
	if err != nil {
		t.Fatalf("connect RabbitMQ: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	pub, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := pub.Confirm(false); err != nil {
		t.Fatal(err)
	}
	adm, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	b := &amqpBroker{url: raw, queue: "cchaos-" + id, pub: pub, adm: adm}
	if _, err := adm.QueueDeclare(b.queue, true, false, false, false, nil); err != nil {
		t.Fatalf("declare queue: %v", err)
	}
	t.Cleanup(func() { _, _ = adm.QueueDelete(b.queue, false, false, false) })
	return b
}

func (b *amqpBroker) Addr() string            { return hostPort(b.url, "5672") }
func (b *amqpBroker) URL(relay string) string { return withHost(b.url, relay) }
func (b *amqpBroker) Target() string          { return b.queue }

func (b *amqpBroker) Publish(ctx context.Context, body []byte, msgID string) error {
	conf, err := b.pub.PublishWithDeferredConfirmWithContext(ctx, "", b.queue, false, false,
		amqp091.Publishing{Body: body, MessageId: msgID, DeliveryMode: amqp091.Persistent})
	if err != nil {
		return err
	}
	ok, err := conf.WaitContext(ctx)
	if err == nil && !ok {
		err = fmt.Errorf("publish %s: nacked by the broker", msgID)
	}
	return err
}

func (b *amqpBroker) Pending(context.Context) (int, error) {
	q, err := b.adm.QueueDeclarePassive(b.queue, true, false, false, false, nil)
	if err != nil {
		return 0, err
	}
	return q.Messages, nil
}

func hostPort(raw, port string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "127.0.0.1:" + port
	}
	if u.Port() == "" {
		return u.Hostname() + ":" + port
	}
	return u.Host
}

type redisBroker struct {
	addr, stream string
	rdb          *redis.Client
}

func newRedis(t *testing.T, id string) broker {
	addr := testenv.RedisAddr(t)
	if addr == "" {
		return nil
	}
	b := &redisBroker{addr: addr, stream: "cchaos:" + id, rdb: redis.NewClient(&redis.Options{Addr: addr})}
	if err := b.rdb.XGroupCreateMkStream(context.Background(), b.stream, "work", "0").Err(); err != nil {
		t.Fatalf("create group: %v", err)
	}
	t.Cleanup(func() {
		_ = b.rdb.Del(context.Background(), b.stream).Err()
		_ = b.rdb.Close()
	})
	return b
}

func (b *redisBroker) Addr() string            { return b.addr }
func (b *redisBroker) URL(relay string) string { return relay }
func (b *redisBroker) Target() string          { return b.stream }

// Publish adds an entry; its entry id is the transport id (msgID goes in a field of its own).
func (b *redisBroker) Publish(ctx context.Context, body []byte, msgID string) error {
	return b.rdb.XAdd(ctx, &redis.XAddArgs{Stream: b.stream, Values: []any{"body", body, "msg", msgID}}).Err()
}

// Pending is the group's entries delivered and not acked, plus those not yet delivered.
func (b *redisBroker) Pending(ctx context.Context) (int, error) {
	gs, err := b.rdb.XInfoGroups(ctx, b.stream).Result()
	if err != nil {
		return 0, err
	}
	for _, g := range gs {
		if g.Name == "work" {
			return int(g.Pending + max(g.Lag, 0)), nil
		}
	}
	return 0, fmt.Errorf("no group in %s", b.stream)
}

type sqsBroker struct {
	endpoint, queueURL string
	api                *awssqs.Client
}

// sqsEndpoint is IDEM_SQS_ENDPOINT (default the local fauxqs server).
func sqsEndpoint(t *testing.T) string {
	return testenv.Service(t, "SQS (fauxqs)", "IDEM_SQS_ENDPOINT", "http://127.0.0.1:4566", testenv.HostPort("4566"))
}

func newSQS(t *testing.T, id string) broker {
	endpoint := sqsEndpoint(t)
	if endpoint == "" {
		return nil
	}
	b := &sqsBroker{endpoint: endpoint, api: awssqs.NewFromConfig(sqs.Config(sqs.ConfigOptions{Endpoint: endpoint}))}
	ctx := context.Background()
	out, err := b.api.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("cchaos-" + id),
		Attributes: map[string]string{"VisibilityTimeout": "3"}})
	if err != nil {
		t.Fatalf("create queue: %v", err)
	}
	b.queueURL = *out.QueueUrl
	t.Cleanup(func() {
		_, _ = b.api.DeleteQueue(context.Background(), &awssqs.DeleteQueueInput{QueueUrl: aws.String(b.queueURL)})
	})
	return b
}

func (b *sqsBroker) Addr() string            { return hostPort(b.endpoint, "4566") }
func (b *sqsBroker) URL(relay string) string { return withHost(b.endpoint, relay) }
func (b *sqsBroker) Target() string          { return b.queueURL }

// Publish sends a message; SQS gives it a message id of its own (msgID goes in an attribute).
func (b *sqsBroker) Publish(ctx context.Context, body []byte, msgID string) error {
	_, err := b.api.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: aws.String(b.queueURL), MessageBody: aws.String(string(body)),
		MessageAttributes: map[string]sqstypes.MessageAttributeValue{"msg": {DataType: aws.String("String"), StringValue: aws.String(msgID)}}})
	return err
}

// Pending is the queue's visible, hidden (received, not deleted) and delayed messages.
func (b *sqsBroker) Pending(ctx context.Context) (int, error) {
	out, err := b.api.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{QueueUrl: aws.String(b.queueURL),
		AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameApproximateNumberOfMessages,
			sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible, sqstypes.QueueAttributeNameApproximateNumberOfMessagesDelayed}})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, v := range out.Attributes {
		k, err := strconv.Atoi(v)
		if err != nil {
			return 0, err
		}
		n += k
	}
	return n, nil
}

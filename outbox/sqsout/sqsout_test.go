package sqsout_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/consumer/sqs"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/outbox"
	"github.com/idemkit/idem/outbox/internal/e2e"
	"github.com/idemkit/idem/outbox/sqsout"
)

func client(t *testing.T) *awssqs.Client {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test (fauxqs); skipped with -short")
	}
	ep := testenv.Service(t, "SQS/SNS (fauxqs)", "IDEM_SQS_ENDPOINT", "http://127.0.0.1:4566", testenv.HostPort("4566"))
	return awssqs.NewFromConfig(sqs.Config(sqs.ConfigOptions{Endpoint: ep}))
}

func queue(t *testing.T, cl *awssqs.Client, fifo bool) string {
	t.Helper()
	name := fmt.Sprintf("outbox-%x", rand.Int64())
	in := &awssqs.CreateQueueInput{QueueName: aws.String(name)}
	if fifo {
		in.QueueName = aws.String(name + ".fifo")
		in.Attributes = map[string]string{"FifoQueue": "true"}
	}
	out, err := cl.CreateQueue(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = cl.DeleteQueue(context.Background(), &awssqs.DeleteQueueInput{QueueUrl: out.QueueUrl}) })
	return aws.ToString(out.QueueUrl)
}

// TestEndToEnd: payments and their events committed together, relayed to an SQS queue with
// every event published twice, consumed by an idem consumer (consumer/sqs) keyed on the
// Idempotency-Key attribute: each payment's effect runs once.
func TestEndToEnd(t *testing.T) {
	t.Parallel()
	cl := client(t)
	url := queue(t, cl, false)
	pub, err := sqsout.New(cl, "outbox-e2e")
	if err != nil {
		t.Fatal(err)
	}
	e2e.Run(t, pub, url, func(ctx context.Context, c *consumer.Consumer) error {
		w, err := sqs.NewWorker(cl, c, sqs.WorkerOptions{QueueURL: url, WaitTime: time.Second})
		if err != nil {
			return err
		}
		return w.Run(ctx)
	})
}

// TestMessage: the key and the headers arrive as message attributes the consumer reads; on a
// FIFO queue a second publish of one row is dropped by SQS.
func TestMessage(t *testing.T) {
	t.Parallel()
	cl := client(t)
	ctx := context.Background()
	for _, fifo := range []bool{false, true} {
		url := queue(t, cl, fifo)
		pub, _ := sqsout.New(cl, "tbl")
		m := outbox.Message{ID: 7, Key: "order-1/paid", Topic: url, Body: []byte(`{"order":1}`), Header: map[string][]string{"X-Trace": {"abc"}}}
		for range 2 {
			if err := pub.Publish(ctx, m); err != nil {
				t.Fatal(err)
			}
		}
		attrs, err := cl.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{QueueUrl: aws.String(url), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessages}})
		if err != nil {
			t.Fatal(err)
		}
		want := "2"
		if fifo {
			want = "1" // the deduplication id names the row
		}
		if n := attrs.Attributes[string(types.QueueAttributeNameApproximateNumberOfMessages)]; n != want {
			t.Fatalf("fifo=%v: %s messages after two publishes of one event, want %s", fifo, n, want)
		}
		out, err := cl.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: 10, WaitTimeSeconds: 1, MessageAttributeNames: []string{"All"}})
		if err != nil || len(out.Messages) == 0 {
			t.Fatalf("fifo=%v: received %v, %v", fifo, out, err)
		}
		msg := sqs.Message(out.Messages[0], url, false)
		if key, err := outbox.KeyOf(msg.Header); err != nil || key != "order-1/paid" || fmt.Sprint(msg.Header["X-Trace"]) != "[abc]" || string(msg.Body) != `{"order":1}` {
			t.Fatalf("fifo=%v: received key %q (%v), header %v, body %s", fifo, key, err, msg.Header, msg.Body)
		}
	}
}

// TestFIFOGroup: on a FIFO queue the order key is the message group (the key when there is
// none), so the events of one order key, whatever their keys, are delivered in order.
func TestFIFOGroup(t *testing.T) {
	t.Parallel()
	cl := client(t)
	ctx := context.Background()
	url := queue(t, cl, true)
	pub, _ := sqsout.New(cl, "tbl")
	long := strings.Repeat("o", idem.MaxStorageKeyLen)
	for i, m := range []outbox.Message{
		{Key: "order-1/created", OrderKey: "order-1"},
		{Key: "order-1/paid", OrderKey: "order-1"},
		{Key: "order-2/created"},
		// Order keys SQS refuses as group ids: a space and a letter outside ASCII, over
		// 128 characters.
		{Key: "kunde 7/created", OrderKey: "kunde 7 ü"},
		{Key: "kunde 7/paid", OrderKey: "kunde 7 ü"},
		{Key: "long/created", OrderKey: long},
	} {
		m.ID, m.Topic, m.Body = int64(i+1), url, []byte(m.Key)
		if err := pub.Publish(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	groups := map[string]string{}
	for len(groups) < 6 {
		out, err := cl.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: 10, WaitTimeSeconds: 1,
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameMessageGroupId}})
		if err != nil || len(out.Messages) == 0 {
			t.Fatalf("received %v, %v after %v", out, err, groups)
		}
		for _, msg := range out.Messages {
			groups[aws.ToString(msg.Body)] = msg.Attributes[string(types.MessageSystemAttributeNameMessageGroupId)]
			if _, err := cl.DeleteMessage(ctx, &awssqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: msg.ReceiptHandle}); err != nil {
				t.Fatal(err)
			}
		}
	}
	valid := regexp.MustCompile(`^[!-~]{1,128}$`) // what SQS takes as a group id
	for body, g := range groups {
		if !valid.MatchString(g) {
			t.Errorf("%s: group id %q is not one SQS takes", body, g)
		}
	}
	if groups["kunde 7/created"] != groups["kunde 7/paid"] || groups["kunde 7/created"] == groups["long/created"] {
		t.Errorf("groups of order keys SQS refuses: %v, want one per order key", groups)
	}
	delete(groups, "kunde 7/created")
	delete(groups, "kunde 7/paid")
	delete(groups, "long/created")
	if want := "map[order-1/created:order-1 order-1/paid:order-1 order-2/created:order-2/created]"; fmt.Sprint(groups) != want {
		t.Fatalf("message groups %v, want %s", groups, want)
	}
}

// More headers than SQS takes, or a name it refuses, is a permanent error; a nil client is
// an option error.
func TestRefused(t *testing.T) {
	pub, _ := sqsout.New(refuseAll{t}, "tbl")
	many := map[string][]string{}
	for i := range 10 {
		many[fmt.Sprint("h", i)] = []string{"v"}
	}
	for _, h := range []map[string][]string{many, {"AWS.trace": {"v"}}, {"a b": {"v"}}, {"X-Trace": {"a\x00b"}}} {
		if err := pub.Publish(context.Background(), outbox.Message{ID: 1, Key: "k", Topic: "q", Header: h}); !outbox.IsPermanent(err) {
			t.Errorf("headers %q: %v, want a permanent error", h, err)
		}
	}
	// Text SQS refuses in a body or in the key's attribute: a control character, invalid
	// UTF-8, U+FFFF.
	for _, bad := range []string{"a\x00b", "a\x1fb", "\xff", "a\uffffb"} {
		if err := pub.Publish(context.Background(), outbox.Message{ID: 1, Key: "k", Topic: "q", Body: []byte(bad)}); !outbox.IsPermanent(err) {
			t.Errorf("body %q: %v, want a permanent error", bad, err)
		}
		if err := pub.Publish(context.Background(), outbox.Message{ID: 1, Key: bad, Topic: "q"}); !outbox.IsPermanent(err) {
			t.Errorf("key %q: %v, want a permanent error", bad, err)
		}
	}
	var oe *idem.OptionError
	if _, err := sqsout.New(nil, ""); !errors.As(err, &oe) || oe.Field != "api" {
		t.Errorf("nil api: %v", err)
	}
}

// refuseAll is an API that fails the test if a message reaches it.
type refuseAll struct{ t *testing.T }

func (r refuseAll) SendMessage(context.Context, *awssqs.SendMessageInput, ...func(*awssqs.Options)) (*awssqs.SendMessageOutput, error) {
	r.t.Error("a message SQS cannot take was sent")
	return nil, errors.New("not sent")
}

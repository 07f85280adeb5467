package sqs_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/consumer/consumertest"
	"github.com/idemkit/idem/consumer/sqs"
)

// visibility is the visibility timeout of the conformance workers: how long a crashed worker's
// messages stay hidden before SQS redelivers them.
const visibility = 2 * time.Second

// broker makes a fresh queue on fauxqs for each test; with viaSNS, messages are published to an
// SNS topic that delivers them to the queue in envelopes.
type broker struct{ viaSNS bool }

func (br broker) NewQueue(t testing.TB) consumertest.Queue {
	t.Helper()
	b := setup(t)
	url, arn := b.queue(t, "conf", nil)
	q := &queue{b: b, url: url}
	if br.viaSNS {
		q.topic = b.topic(t, "conf", []string{arn}, []bool{false})
	}
	return q
}

type queue struct {
	b     *bundle
	url   string
	topic string // publish here when set
}

func (q *queue) Publish(ctx context.Context, body []byte) error {
	if q.topic != "" {
		_, err := q.b.sns.Publish(ctx, &sns.PublishInput{TopicArn: aws.String(q.topic), Message: aws.String(string(body))})
		return err
	}
	_, err := q.b.sqs.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: aws.String(q.url), MessageBody: aws.String(string(body))})
	return err
}

// Start runs a Worker whose SQS client dies at a crash: from then on every call fails, and a
// receive under way loses what it received (those messages stay hidden until their visibility
// timeout runs out, as with a process killed mid-receive).
func (q *queue) Start(ctx context.Context, c *consumer.Consumer, crash func() bool) (consumertest.Worker, error) {
	api := &mortal{Client: q.b.sqs}
	rctx, cancel := context.WithCancel(ctx)
	wk := &worker{cancel: cancel, done: make(chan struct{}), kill: func() { api.dead.Store(true); cancel() }}
	opt := sqs.WithBeforeDelete(sqs.WorkerOptions{QueueURL: q.url, Concurrency: 4, WaitTime: time.Second,
		VisibilityTimeout: visibility, Logger: quiet()}, func(consumer.Result) bool {
		if crash != nil && crash() {
			api.dead.Store(true)
			cancel()
			return true
		}
		return false
	})
	w, err := sqs.NewWorker(api, c, opt)
	if err != nil {
		cancel()
		return nil, err
	}
	go func() {
		defer close(wk.done)
		_ = w.Run(rctx)
	}()
	return wk, nil
}

func (q *queue) Pending(ctx context.Context) (int, error) {
	return q.b.pendingErr(ctx, q.url)
}

type worker struct {
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
	kill   func()
}

func (w *worker) Stop()                 { w.once.Do(w.cancel); <-w.done }
func (w *worker) Done() <-chan struct{} { return w.done }
func (w *worker) Kill()                 { w.kill() }

var errDead = errors.New("injected: the process died")

// mortal is the real SQS client until dead is set; then every call fails.
type mortal struct {
	*awssqs.Client
	dead atomic.Bool
}

func (m *mortal) ReceiveMessage(ctx context.Context, in *awssqs.ReceiveMessageInput, opts ...func(*awssqs.Options)) (*awssqs.ReceiveMessageOutput, error) {
	if m.dead.Load() {
		return nil, errDead
	}
	out, err := m.Client.ReceiveMessage(ctx, in, opts...)
	if m.dead.Load() {
		return nil, errDead
	}
	return out, err
}

func (m *mortal) DeleteMessage(ctx context.Context, in *awssqs.DeleteMessageInput, opts ...func(*awssqs.Options)) (*awssqs.DeleteMessageOutput, error) {
	if m.dead.Load() {
		return nil, errDead
	}
	return m.Client.DeleteMessage(ctx, in, opts...)
}

func (m *mortal) ChangeMessageVisibility(ctx context.Context, in *awssqs.ChangeMessageVisibilityInput, opts ...func(*awssqs.Options)) (*awssqs.ChangeMessageVisibilityOutput, error) {
	if m.dead.Load() {
		return nil, errDead
	}
	return m.Client.ChangeMessageVisibility(ctx, in, opts...)
}

func TestConformance(t *testing.T) {
	t.Parallel()
	opt := consumertest.Options{Redelivery: visibility, SkipRejected: true}
	t.Run("sqs", func(t *testing.T) {
		t.Parallel()
		consumertest.Run(t, broker{}, opt)
	})
	t.Run("sns-envelope", func(t *testing.T) {
		t.Parallel()
		consumertest.Run(t, broker{viaSNS: true}, opt)
	})
}

package sqs_test

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	snstypes "github.com/aws/aws-sdk-go-v2/service/sns/types"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/idemkit/idem/consumer/sqs"
	"github.com/idemkit/idem/internal/oteltest"
)

// TestTraceContinued: a message sent with the producer's W3C traceparent in its SQS message
// attributes, or published to SNS with it in the publish's attributes (delivered in an SNS
// envelope, or raw), is handled under the producer's trace: the consumer's span, the engine's
// claim, effect and completion, and the handler's span are its descendants; a duplicate sent
// under another producer span replays in that span's trace.
func TestTraceContinued(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("integration test (SQS); skipped with -short")
	}
	cfg := sqs.Config(sqs.ConfigOptions{Endpoint: sqsEndpoint(t)})
	b := &bundle{sqs: awssqs.NewFromConfig(cfg), sns: sns.NewFromConfig(cfg), prefix: "t" + randHex(6)}
	const body = "order:order-1:body-secret"
	for _, via := range []string{"sqs", "sns-envelope", "sns-raw"} {
		t.Run(via, func(t *testing.T) {
			t.Parallel()
			url, arn := b.queue(t, "trace-"+via, nil)
			var topic string
			if via != "sqs" {
				topic = b.topic(t, "trace-"+via, []string{arn}, []bool{via == "sns-raw"})
			}
			tr := oteltest.New(t)
			w, err := sqs.NewWorker(b.sqs, tr.Consumer(t), sqs.WorkerOptions{QueueURL: url, WaitTime: time.Second, Concurrency: 2, Logger: quiet()})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- w.Run(ctx) }()
			defer func() {
				cancel()
				if err := <-done; err != nil {
					t.Error(err)
				}
			}()
			for _, dup := range []bool{false, true} {
				producer, headers := tr.Produce()
				if via == "sqs" {
					attrs := map[string]types.MessageAttributeValue{}
					for k, v := range headers {
						attrs[k] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
					}
					_, err = b.sqs.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(body), MessageAttributes: attrs})
				} else {
					attrs := map[string]snstypes.MessageAttributeValue{}
					for k, v := range headers {
						attrs[k] = snstypes.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
					}
					_, err = b.sns.Publish(ctx, &sns.PublishInput{TopicArn: aws.String(topic), Message: aws.String(body), MessageAttributes: attrs})
				}
				if err != nil {
					t.Fatal(err)
				}
				tr.Check(t, "body-secret", producer, dup)
			}
		})
	}
}

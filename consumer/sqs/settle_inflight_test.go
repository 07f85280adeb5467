package sqs_test

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/consumer/sqs"
)

// TestSettleHidesForRetryAfter: a message whose key is in flight elsewhere (OutcomeInFlight), or
// that failed with a RetryAfter, is hidden for Result.RetryAfter and then redelivered, not
// left hidden for the rest of its 30s visibility timeout.
func TestSettleHidesForRetryAfter(t *testing.T) {
	t.Parallel()
	for _, outcome := range []consumer.Outcome{consumer.OutcomeInFlight, consumer.OutcomeFailed} {
		t.Run(outcome.String(), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			url, _ := b.queue(t, "settle", nil)
			b.send(t, url, []string{orderBody("o-1", 1)})
			ctx := context.Background()
			receive := func(wait int32) string {
				out, err := b.sqs.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: aws.String(url),
					MaxNumberOfMessages: 1, VisibilityTimeout: 30, WaitTimeSeconds: wait})
				if err != nil {
					t.Fatal(err)
				}
				if len(out.Messages) == 0 {
					return ""
				}
				return *out.Messages[0].ReceiptHandle
			}
			receipt := receive(5)
			if receipt == "" {
				t.Fatal("the message was not received")
			}
			start := time.Now()
			if err := sqs.Settle(ctx, b.sqs, url, receipt, consumer.Result{Outcome: outcome, RetryAfter: time.Second}); err != nil {
				t.Fatal(err)
			}
			for receive(1) == "" {
				if time.Since(start) > 8*time.Second {
					t.Fatalf("%s with a 1s RetryAfter: still hidden after %s (left for its 30s visibility timeout)", outcome, time.Since(start))
				}
			}
			if took := time.Since(start); took < 900*time.Millisecond {
				t.Fatalf("%s with a 1s RetryAfter: redelivered after %s", outcome, took)
			}
		})
	}
}

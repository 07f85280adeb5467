package sqs

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/aws/aws-lambda-go/events"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/consumer"
)

// LambdaOptions configure LambdaHandler. The zero value is useful.
type LambdaOptions struct {
	// Concurrency is how many records of a batch from a standard queue are handled at once.
	// Records from a FIFO queue are always handled one at a time, in order. Default 1.
	Concurrency int
	// KeepSNSEnvelope hands the handler the SNS envelope as the body instead of taking it
	// off. Default false: envelopes are taken off (see UnwrapSNS).
	KeepSNSEnvelope bool
}

// LambdaHandler returns a Lambda function handler for SQS events (pass it to lambda.Start),
// for an event source mapping with ReportBatchItemFailures enabled.
//
// Each record is converted with LambdaMessage (SNS envelopes taken off) and handled by c. The
// response lists in BatchItemFailures exactly the records that are not done with: those whose
// Outcome is OutcomeInFlight, OutcomeFailed or OutcomeRejected (a rejected record comes back until the queue's
// redrive policy moves it to the dead-letter queue). SQS deletes the others (OutcomeExecuted,
// OutcomeReplay) and redelivers only those. A panic in the handler fails its record only (the
// engine has released the claim). Records from a FIFO queue (an event source ARN ending
// in ".fifo") are handled in order and the handling stops at the first failure: that record
// and every later one are reported, so the group's order is kept. Records not started because
// ctx ended (the function is about to time out) are reported too. The returned error is
// always nil: a failure is a record's, never the batch's.
func LambdaHandler(c *consumer.Consumer, opt LambdaOptions) (func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error), error) {
	if c == nil {
		return nil, &idem.OptionError{Package: "sqs", Field: "consumer", Problem: "is nil"}
	}
	if opt.Concurrency < 0 {
		return nil, &idem.OptionError{Package: "sqs", Field: "LambdaOptions.Concurrency", Problem: fmt.Sprintf("%d is negative", opt.Concurrency)}
	}
	conc := cmp.Or(opt.Concurrency, 1)
	return func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
		failed := make([]bool, len(ev.Records))
		if isFIFO(ev) {
			for i, r := range ev.Records {
				if ctx.Err() != nil || !handleRecord(ctx, c, r, opt.KeepSNSEnvelope) {
					for j := i; j < len(failed); j++ {
						failed[j] = true
					}
					break
				}
			}
		} else {
			sem := make(chan struct{}, conc)
			var wg sync.WaitGroup
			for i, r := range ev.Records {
				select {
				case sem <- struct{}{}:
				case <-ctx.Done():
				}
				if ctx.Err() != nil {
					failed[i] = true
					continue
				}
				wg.Go(func() {
					defer func() { <-sem }()
					failed[i] = !handleRecord(ctx, c, r, opt.KeepSNSEnvelope)
				})
			}
			wg.Wait()
		}
		resp := events.SQSEventResponse{BatchItemFailures: []events.SQSBatchItemFailure{}}
		for i, f := range failed {
			if f {
				resp.BatchItemFailures = append(resp.BatchItemFailures,
					events.SQSBatchItemFailure{ItemIdentifier: ev.Records[i].MessageId})
			}
		}
		return resp, nil
	}, nil
}

func isFIFO(ev events.SQSEvent) bool {
	return len(ev.Records) > 0 && strings.HasSuffix(ev.Records[0].EventSourceARN, ".fifo")
}

// handleRecord handles one record and reports whether it is done with; a panic in the handler
// fails the record, not the batch.
func handleRecord(ctx context.Context, c *consumer.Consumer, r events.SQSMessage, keepEnvelope bool) (done bool) {
	defer func() {
		if p := recover(); p != nil {
			done = false
		}
	}()
	return c.Handle(ctx, LambdaMessage(r, keepEnvelope)).Outcome.Ack()
}

package sqs

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/aws/aws-lambda-go/events"
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
// Each record is converted to a Message (SNS envelopes taken off) and given to h. The response
// lists in BatchItemFailures exactly the records for which h returned an error, so SQS deletes
// the others and redelivers only those. Records from a FIFO queue (an event source ARN ending
// in ".fifo") are handled in order and the handling stops at the first failure: that record
// and every later one are reported, so the group's order is kept. Records not started because
// ctx ended (the function is about to time out) are reported too. The returned error is
// always nil: a failure is a record's, never the batch's.
func LambdaHandler(h Handler, opt LambdaOptions) (func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error), error) {
	if h == nil {
		return nil, fmt.Errorf("%w: handler is nil", errInvalid)
	}
	if opt.Concurrency < 0 {
		return nil, fmt.Errorf("%w: LambdaOptions.Concurrency %d is negative", errInvalid, opt.Concurrency)
	}
	conc := cmp.Or(opt.Concurrency, 1)
	return func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
		failed := make([]bool, len(ev.Records))
		if isFIFO(ev) {
			for i, r := range ev.Records {
				if ctx.Err() != nil || handleRecord(ctx, h, r, opt.KeepSNSEnvelope) != nil {
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
					failed[i] = handleRecord(ctx, h, r, opt.KeepSNSEnvelope) != nil
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

// handleRecord runs h on one record; a panic in h fails the record, not the batch.
func handleRecord(ctx context.Context, h Handler, r events.SQSMessage, keepEnvelope bool) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("consumer/sqs: handler panicked: %v", p)
		}
	}()
	return h(ctx, FromLambda(r, keepEnvelope))
}

// FromLambda converts a record of a Lambda SQS event to a Message, taking an SNS envelope off
// unless keepEnvelope is set.
func FromLambda(r events.SQSMessage, keepEnvelope bool) *Message {
	m := &Message{MessageID: r.MessageId, ReceiptHandle: r.ReceiptHandle}
	var attrs map[string]string
	for k, v := range r.MessageAttributes {
		if v.StringValue == nil {
			continue
		}
		if attrs == nil {
			attrs = make(map[string]string, len(r.MessageAttributes))
		}
		attrs[k] = *v.StringValue
	}
	m.unwrap(r.Body, attrs, keepEnvelope)
	m.system(r.Attributes)
	return m
}

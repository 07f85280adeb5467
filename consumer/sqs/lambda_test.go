package sqs_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/consumer/sqs"
	"github.com/idemkit/idem/store/memstore"
)

// lambdaEvent builds an SQS event the way Lambda delivers it: from JSON.
func lambdaEvent(t *testing.T, arn string, records ...[2]string) events.SQSEvent {
	t.Helper()
	type rec struct {
		MessageID      string            `json:"messageId"`
		ReceiptHandle  string            `json:"receiptHandle"`
		Body           string            `json:"body"`
		Attributes     map[string]string `json:"attributes"`
		EventSource    string            `json:"eventSource"`
		EventSourceARN string            `json:"eventSourceARN"`
		AWSRegion      string            `json:"awsRegion"`
	}
	var in struct {
		Records []rec `json:"Records"`
	}
	for _, r := range records {
		in.Records = append(in.Records, rec{MessageID: r[0], ReceiptHandle: "rh-" + r[0], Body: r[1],
			Attributes:  map[string]string{"ApproximateReceiveCount": "1", "SentTimestamp": "1520621625029"},
			EventSource: "aws:sqs", EventSourceARN: arn, AWSRegion: "us-east-1"})
	}
	raw, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var ev events.SQSEvent
	if err := json.Unmarshal(raw, &ev); err != nil {
		t.Fatal(err)
	}
	return ev
}

func failedIDs(resp events.SQSEventResponse) []string {
	var ids []string
	for _, f := range resp.BatchItemFailures {
		ids = append(ids, f.ItemIdentifier)
	}
	slices.Sort(ids)
	return ids
}

const stdARN = "arn:aws:sqs:us-east-1:123456789012:orders"

// envelopeFor wraps body in an SNS envelope as SNS delivers it to a queue.
func envelopeFor(id, body string) string {
	b, _ := json.Marshal(map[string]any{"Type": "Notification", "MessageId": id,
		"TopicArn": "arn:aws:sns:us-east-1:123456789012:orders", "Message": body, "Timestamp": "2026-11-30T12:00:00.000Z"})
	return string(b)
}

// One batch holds the same order twice (raw, and fanned out through SNS), an order whose effect
// fails and a record that is not an order: only the two failures are reported, and the effect of
// the duplicated order runs once. The redelivery of the failures then succeeds.
func TestLambdaBatchItemFailures(t *testing.T) {
	t.Parallel()
	b := setupPG(t)
	var refuse atomic.Bool
	refuse.Store(true)
	c := newConsumer(t, newEngine(t, nil, idem.Options{}), "svc", func(ctx context.Context, key string, m *consumer.Message) error {
		if key == "svc/order/o-2" && refuse.Load() {
			return errors.New("card declined by a flaky gateway")
		}
		return b.effect(ctx, key, m.ID)
	})
	// One at a time (the default): with records handled at once, the second copy of o-1 may
	// find the first in flight and is then, rightly, reported for redelivery.
	handler, err := sqs.LambdaHandler(c, sqs.LambdaOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ev := lambdaEvent(t, stdARN,
		[2]string{"m1", orderBody("o-1", 100)},
		[2]string{"m2", envelopeFor("sns-1", orderBody("o-1", 100))},
		[2]string{"m3", orderBody("o-2", 200)},
		[2]string{"m4", "not an order"},
		[2]string{"m5", orderBody("o-3", 300)},
	)
	resp, err := handler(context.Background(), ev)
	if err != nil {
		t.Fatal(err)
	}
	if got := failedIDs(resp); !slices.Equal(got, []string{"m3", "m4"}) {
		t.Fatalf("batch item failures %v, want [m3 m4]", got)
	}
	out, _ := json.Marshal(resp)
	if !strings.Contains(string(out), `"batchItemFailures":[{"itemIdentifier":"m3"}`) {
		t.Errorf("response JSON %s", out)
	}

	// SQS redelivers m3 and m4 (new ids, as after a DLQ redrive) with another copy of o-1.
	refuse.Store(false)
	resp, err = handler(context.Background(), lambdaEvent(t, stdARN,
		[2]string{"m6", orderBody("o-2", 200)},
		[2]string{"m7", envelopeFor("sns-2", orderBody("o-1", 100))},
	))
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("redelivery: failures %v, err %v", failedIDs(resp), err)
	}
	if out, _ := json.Marshal(resp); string(out) != `{"batchItemFailures":[]}` {
		t.Errorf("empty response JSON %s, want an empty list", out)
	}
	counts := b.counts(t)
	for _, k := range []string{"svc/order/o-1", "svc/order/o-2", "svc/order/o-3"} {
		if counts[k] != 1 {
			t.Errorf("effect for %s ran %d times", k, counts[k])
		}
	}
	if len(counts) != 3 {
		t.Errorf("effects %v", counts)
	}
}

func TestLambdaFIFOStopsAtFirstFailure(t *testing.T) {
	t.Parallel()
	var calls []string
	c, err := consumer.New(consumer.Options{Runner: newEngine(t, nil, idem.Options{}), Key: func(m *consumer.Message) (string, error) { return string(m.Body), nil }, Logger: quiet()}, func(ctx context.Context, m *consumer.Message) ([]byte, error) {
		calls = append(calls, m.ID)
		if m.ID == "m2" {
			return nil, errors.New("fails")
		}
		return nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	handler, err := sqs.LambdaHandler(c, sqs.LambdaOptions{Concurrency: 8})
	if err != nil {
		t.Fatal(err)
	}
	resp, _ := handler(context.Background(), lambdaEvent(t, stdARN+".fifo",
		[2]string{"m1", "a"}, [2]string{"m2", "b"}, [2]string{"m3", "c"}, [2]string{"m4", "d"}))
	if got := failedIDs(resp); !slices.Equal(got, []string{"m2", "m3", "m4"}) {
		t.Errorf("failures %v, want [m2 m3 m4]", got)
	}
	if !slices.Equal(calls, []string{"m1", "m2"}) {
		t.Errorf("handled %v, want [m1 m2] in order", calls)
	}
}

func TestLambdaPanicAndDeadline(t *testing.T) {
	t.Parallel()
	c, err := consumer.New(consumer.Options{Runner: newEngine(t, nil, idem.Options{}), Key: func(m *consumer.Message) (string, error) { return m.ID + string(m.Body), nil }, Logger: quiet()}, func(ctx context.Context, m *consumer.Message) ([]byte, error) {
		if string(m.Body) == "boom" {
			panic("handler bug")
		}
		return nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	handler, err := sqs.LambdaHandler(c, sqs.LambdaOptions{})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := handler(context.Background(), lambdaEvent(t, stdARN, [2]string{"m1", "ok"}, [2]string{"m2", "boom"}))
	if err != nil || !slices.Equal(failedIDs(resp), []string{"m2"}) {
		t.Errorf("panic: failures %v, err %v", failedIDs(resp), err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	resp, err = handler(ctx, lambdaEvent(t, stdARN, [2]string{"m3", "ok"}, [2]string{"m4", "ok"}))
	if err != nil || !slices.Equal(failedIDs(resp), []string{"m3", "m4"}) {
		t.Errorf("function out of time: failures %v, err %v; want every record reported", failedIDs(resp), err)
	}
	if _, err := sqs.LambdaHandler(nil, sqs.LambdaOptions{}); !errors.Is(err, idem.ErrInvalidInput) {
		t.Errorf("nil handler: %v", err)
	}
	if _, err := sqs.LambdaHandler(c, sqs.LambdaOptions{Concurrency: -1}); !errors.Is(err, idem.ErrInvalidInput) || !strings.Contains(err.Error(), "Concurrency") {
		t.Errorf("negative concurrency: %v", err)
	}
}

func TestLambdaMessage(t *testing.T) {
	t.Parallel()
	var ev events.SQSEvent
	raw := `{"Records":[{"messageId":"m1","receiptHandle":"rh","body":` + jsonString(envelope) + `,` +
		`"attributes":{"ApproximateReceiveCount":"3","SentTimestamp":"1520621625029"},` +
		`"messageAttributes":{"a":{"stringValue":"x","dataType":"String"},"b":{"binaryValue":"AAE=","dataType":"Binary"}},` +
		`"eventSource":"aws:sqs","eventSourceARN":"` + stdARN + `","awsRegion":"us-east-1"}]}`
	if err := json.Unmarshal([]byte(raw), &ev); err != nil {
		t.Fatal(err)
	}
	m := sqs.LambdaMessage(ev.Records[0], false)
	h := func(m *consumer.Message, k string) string {
		if len(m.Header[k]) != 1 {
			return ""
		}
		return m.Header[k][0]
	}
	if m.ID != "m1" || !m.Redelivered || m.Subject != "arn:aws:sns:us-east-1:000000000000:orders" ||
		string(m.Body) != `{"order":"o-1","cents":500}` || h(m, "a") != "x" || h(m, "tenant") != "acme" || h(m, "n") != "7" {
		t.Errorf("message %+v", m)
	}
	if _, ok := m.Header["blob"]; ok {
		t.Error("binary attribute carried as a string")
	}
	if _, ok := m.Header["b"]; ok {
		t.Error("binary SQS attribute carried as a string")
	}
	if k := sqs.LambdaMessage(ev.Records[0], true); k.Subject != "orders" || string(k.Body) != envelope {
		t.Errorf("KeepSNSEnvelope: %+v", k)
	}
}

func jsonString(s string) string { b, _ := json.Marshal(s); return string(b) }

// Batches of many copies of a few orders, handled eight at a time: copies that find their order
// in flight are reported and come back in the next batch (as SQS would redeliver them), until
// none is reported. Every effect runs once.
func TestLambdaConcurrentDuplicates(t *testing.T) {
	t.Parallel()
	b := setupPG(t)
	store := memstore.New()
	var batch [][2]string
	n := 0
	for c := range 10 {
		for i := range 8 {
			n++
			body := orderBody(fmt.Sprintf("o-%d", i), i)
			if c%2 == 1 {
				body = envelopeFor("sns", body)
			}
			batch = append(batch, [2]string{fmt.Sprintf("m%d", n), body})
		}
	}
	for round := 0; len(batch) > 0; round++ {
		if round == 20 {
			t.Fatalf("%d records still failing after 20 rounds", len(batch))
		}
		// A fresh engine per invocation, sharing the store: Lambda instances come and go.
		c := newConsumer(t, newEngine(t, store, idem.Options{}), "svc", func(ctx context.Context, key string, m *consumer.Message) error {
			return b.effect(ctx, key, m.ID)
		})
		handler, err := sqs.LambdaHandler(c, sqs.LambdaOptions{Concurrency: 8})
		if err != nil {
			t.Fatal(err)
		}
		resp, err := handler(context.Background(), lambdaEvent(t, stdARN, batch...))
		if err != nil {
			t.Fatal(err)
		}
		failed := map[string]bool{}
		for _, f := range resp.BatchItemFailures {
			failed[f.ItemIdentifier] = true
		}
		var next [][2]string
		for _, r := range batch {
			if failed[r[0]] {
				next = append(next, r)
			}
		}
		batch = next
	}
	counts := b.counts(t)
	if len(counts) != 8 {
		t.Fatalf("effects %v, want 8 keys", counts)
	}
	for k, c := range counts {
		if c != 1 {
			t.Errorf("effect for %s ran %d times", k, c)
		}
	}
}

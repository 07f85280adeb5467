package sqs_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"os/signal"

	"github.com/aws/aws-lambda-go/events"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/consumer/sqs"
	"github.com/idemkit/idem/store/memstore"
)

// A Worker consumes a queue until interrupted; the handler charges each order once, keyed on
// the order id. (It needs an SQS server, so it is compiled but not run.)
func ExampleWorker() {
	engine, err := idem.New(memstore.New(), idem.Options{})
	if err != nil {
		log.Fatal(err)
	}
	client := awssqs.NewFromConfig(sqs.Config(sqs.ConfigOptions{Endpoint: "http://127.0.0.1:4566"}))
	charge := func(ctx context.Context, orderID string, cents int) error { return nil }

	handler := func(ctx context.Context, m *sqs.Message) error {
		var o struct {
			ID    string `json:"order"`
			Cents int    `json:"cents"`
		}
		if err := json.Unmarshal(m.Body, &o); err != nil || o.ID == "" {
			return fmt.Errorf("not an order: %q", m.Body)
		}
		_, err := engine.Do(ctx, "billing/order/"+o.ID, idem.Fingerprint(m.Body),
			func(ctx context.Context) (idem.Response, error) { return idem.Response{}, charge(ctx, o.ID, o.Cents) })
		return err
	}
	w, err := sqs.NewWorker(client, handler, sqs.WorkerOptions{
		QueueURL:    "http://sqs.us-east-1.localhost:4566/000000000000/orders",
		Concurrency: 16,
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := w.Run(ctx); err != nil { // returns after a graceful stop
		log.Fatal(err)
	}
}

// The same event reaches a queue twice, once raw and once in an SNS envelope, with different
// message ids; the handler sees one payload and the effect runs once. The record the handler
// fails on is the only one reported back to Lambda.
func ExampleLambdaHandler() {
	engine, _ := idem.New(memstore.New(), idem.Options{})
	handler := func(ctx context.Context, m *sqs.Message) error {
		var o struct {
			ID string `json:"order"`
		}
		if err := json.Unmarshal(m.Body, &o); err != nil || o.ID == "" {
			return fmt.Errorf("not an order: %q", m.Body)
		}
		res, err := engine.Do(ctx, "billing/order/"+o.ID, idem.Fingerprint(m.Body),
			func(ctx context.Context) (idem.Response, error) {
				fmt.Println("charging", o.ID)
				return idem.Response{}, nil
			})
		if err == nil && res.Replayed {
			fmt.Println("duplicate of", o.ID, "in", m.MessageID)
		}
		return err
	}
	lambdaHandler, _ := sqs.LambdaHandler(handler, sqs.LambdaOptions{})

	var ev events.SQSEvent
	_ = json.Unmarshal([]byte(`{"Records":[
		{"messageId":"a1","body":"{\"order\":\"o-7\"}","eventSourceARN":"arn:aws:sqs:us-east-1:123456789012:orders"},
		{"messageId":"b2","body":"{\"Type\":\"Notification\",\"MessageId\":\"n1\",\"TopicArn\":\"arn:aws:sns:us-east-1:123456789012:orders\",\"Message\":\"{\\\"order\\\":\\\"o-7\\\"}\"}","eventSourceARN":"arn:aws:sqs:us-east-1:123456789012:orders"},
		{"messageId":"c3","body":"garbage","eventSourceARN":"arn:aws:sqs:us-east-1:123456789012:orders"}]}`), &ev)

	resp, _ := lambdaHandler(context.Background(), ev)
	out, _ := json.Marshal(resp)
	fmt.Println(string(out))
	// Output:
	// charging o-7
	// duplicate of o-7 in b2
	// {"batchItemFailures":[{"itemIdentifier":"c3"}]}
}

// UnwrapSNS takes the published message out of an SNS envelope.
func ExampleUnwrapSNS() {
	body := `{"Type":"Notification","MessageId":"n1","TopicArn":"arn:aws:sns:us-east-1:123456789012:orders",` +
		`"Message":"{\"order\":\"o-7\"}","MessageAttributes":{"tenant":{"Type":"String","Value":"acme"}}}`
	env, ok := sqs.UnwrapSNS([]byte(body))
	fmt.Println(ok, env.Message, env.MessageAttributes["tenant"].Value)
	_, ok = sqs.UnwrapSNS([]byte(`{"order":"o-7"}`))
	fmt.Println(ok)
	// Output:
	// true {"order":"o-7"} acme
	// false
}

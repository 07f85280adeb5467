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
	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/consumer/sqs"
	"github.com/idemkit/idem/store/memstore"
)

// orderID is the key function of the examples: the business fact, never the message id.
func orderID(m *consumer.Message) (string, error) {
	var o struct {
		ID string `json:"order"`
	}
	if err := json.Unmarshal(m.Body, &o); err != nil || o.ID == "" {
		return "", fmt.Errorf("no order id in %q", m.Body)
	}
	return "order/" + o.ID, nil
}

// A Worker consumes a queue until interrupted, charging each order once. (It needs an SQS
// server, so it is compiled but not run.)
func ExampleWorker() {
	engine, err := idem.New(memstore.New(), idem.Options{}) // a shared store (pgstore) in production
	if err != nil {
		log.Fatal(err)
	}
	charge := func(ctx context.Context, m *consumer.Message) ([]byte, error) {
		return []byte("charge-id"), nil // the effect, and a small result kept for duplicates
	}
	c, err := consumer.New(consumer.Options{Runner: engine, Scope: "billing", Key: orderID}, charge)
	if err != nil {
		log.Fatal(err)
	}
	client := awssqs.NewFromConfig(sqs.Config(sqs.ConfigOptions{Endpoint: "http://127.0.0.1:4566"}))
	w, err := sqs.NewWorker(client, c, sqs.WorkerOptions{
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

// The same order reaches a queue twice, once raw and once in an SNS envelope, with different
// message ids: the charge runs once. The record without an order id is the only one reported
// back to Lambda for redelivery (and, in the end, the dead-letter queue).
func ExampleLambdaHandler() {
	engine, _ := idem.New(memstore.New(), idem.Options{})
	c, _ := consumer.New(consumer.Options{Runner: engine, Scope: "billing", Key: orderID,
		OnEvent: func(ev consumer.Event) {
			m, r := ev.Message, ev.Result
			fmt.Println(m.ID, r.Outcome)
		}}, func(ctx context.Context, m *consumer.Message) ([]byte, error) {
		fmt.Printf("charging %s (message %s)\n", m.Body, m.ID)
		return nil, nil
	})
	handler, _ := sqs.LambdaHandler(c, sqs.LambdaOptions{})

	var ev events.SQSEvent
	_ = json.Unmarshal([]byte(`{"Records":[
		{"messageId":"a1","body":"{\"order\":\"o-7\"}","eventSourceARN":"arn:aws:sqs:us-east-1:123456789012:orders"},
		{"messageId":"b2","body":"{\"Type\":\"Notification\",\"MessageId\":\"n1\",\"TopicArn\":\"arn:aws:sns:us-east-1:123456789012:orders\",\"Message\":\"{\\\"order\\\":\\\"o-7\\\"}\"}","eventSourceARN":"arn:aws:sqs:us-east-1:123456789012:orders"},
		{"messageId":"c3","body":"garbage","eventSourceARN":"arn:aws:sqs:us-east-1:123456789012:orders"}]}`), &ev)

	resp, _ := handler(context.Background(), ev)
	out, _ := json.Marshal(resp)
	fmt.Println(string(out))
	// Output:
	// charging {"order":"o-7"} (message a1)
	// a1 executed
	// b2 replay
	// c3 rejected
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

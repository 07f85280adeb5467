// Command lambda-events is an AWS Lambda function that ships each order once, whichever event
// source delivers it: an EventBridge rule, a Kinesis stream, a DynamoDB stream or S3 event
// notifications. Every source delivers at least once, and a stream retries a failed batch from
// its checkpoint, so the same fact arrives more than once; the function's idem records in
// DynamoDB make the shipment (a call to a warehouse that is not idempotent) happen once.
//
// One program serves the four sources because they differ in two lines only: where the fact
// is (the key function) and which handler idemlambda gives for the event's shape. The source
// is chosen by the function's environment, so one build deploys as four functions:
//
//	IDEM_EVENT_SOURCE    eventbridge, kinesis, dynamodb or s3
//	IDEM_TABLE           the idem table (default "idem"; create it with `idem migrate`)
//	WAREHOUSE_URL        where a shipment is POSTed
//
// For Kinesis and DynamoDB Streams, turn on ReportBatchItemFailures in the event source
// mapping (FunctionResponseTypes: ReportBatchItemFailures) and set MaximumRetryAttempts: a
// failed record is reported with every later record of its shard, and the stream retries from
// it; the records before it are done and replay if they come again.
//
// Build and deploy it as any Go function on the provided.al2023 runtime:
//
//	GOOS=linux GOARCH=arm64 go build -tags lambda.norpc -o bootstrap ./examples/lambda-events
//
// Its test runs it as Lambda does, in a process polling a local Runtime API, on DynamoDB
// Local (IDEM_DYNAMODB_ENDPOINT, default http://127.0.0.1:8000, which the function also reads
// to use DynamoDB Local instead of AWS):
//
//	go test ./examples/lambda-events
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net/http"
	"os"
	"strings"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/idemlambda"
	"github.com/idemkit/idem/store/dynamostore"
)

// order is the fact every source carries: EventBridge in the event's detail, Kinesis in the
// record's data, DynamoDB Streams in the new image of the item the writer put.
type order struct {
	OrderID string `json:"order_id"`
	SKU     string `json:"sku"`
}

// newHandler returns the Lambda handler for source: a consumer that ships what a message
// holds, keyed on the fact, behind the source's idemlambda handler.
func newHandler(source string, runner *idem.Engine, ship func(ctx context.Context, what string) error) (any, error) {
	var key consumer.KeyFunc                                // where the fact is: never the transport's id
	var fingerprint func(*consumer.Message) (string, error) // what must match when a key comes again; default the body
	var what func(m *consumer.Message) (string, error)
	var err error
	switch source {
	case "eventbridge", "kinesis":
		// EventBridge's detail and Kinesis's data are the producer's JSON: {"order_id": …}.
		// The envelope's id and the sequence number are per delivery or per write: a
		// producer's retry makes a second one for the same order.
		key, err = idemlambda.BodyKey("order_id")
		what = func(m *consumer.Message) (string, error) {
			var o order
			err := json.Unmarshal(m.Body, &o)
			return "order " + o.OrderID + " " + o.SKU, err
		}
	case "dynamodb":
		// The writer puts the order and its event item in one transaction; the event item
		// carries an event id, the same in every change of that item.
		key, err = idemlambda.BodyKey("new_image.event_id")
		what = func(m *consumer.Message) (string, error) {
			var ch struct {
				NewImage order `json:"new_image"`
			}
			err := json.Unmarshal(m.Body, &ch)
			return "order " + ch.NewImage.OrderID + " " + ch.NewImage.SKU, err
		}
		// A rewrite of the event item is a MODIFY whose body differs from the INSERT's: the
		// fingerprint is the order it carries, so the rewrite replays instead of conflicting.
		fingerprint = func(m *consumer.Message) (string, error) {
			w, err := what(m)
			return idem.Fingerprint([]byte(w)), err
		}
	case "s3":
		// An uploaded object is the fact: its bucket, key, version id and sequencer.
		key = idemlambda.S3Key
		what = func(m *consumer.Message) (string, error) {
			return "upload s3://" + m.Subject + "/" + m.Header["key"][0], nil
		}
	default:
		return nil, fmt.Errorf("IDEM_EVENT_SOURCE %q: want eventbridge, kinesis, dynamodb or s3", source)
	}
	if err != nil {
		return nil, err
	}
	c, err := consumer.New(consumer.Options{Runner: runner, Scope: "shipping", Key: key, Fingerprint: fingerprint},
		func(ctx context.Context, m *consumer.Message) ([]byte, error) {
			w, err := what(m)
			if err != nil {
				return nil, consumer.Reject(err)
			}
			return nil, ship(ctx, w)
		})
	if err != nil {
		return nil, err
	}
	switch source {
	case "eventbridge":
		return idemlambda.EventBridgeHandler(c) // an error makes Lambda retry the event
	case "kinesis":
		return idemlambda.KinesisHandler(c) // reports batch item failures by sequence number
	case "dynamodb":
		return idemlambda.DynamoDBHandler(c) // the same, for a DynamoDB stream
	default:
		return idemlambda.S3Handler(c) // an error makes Lambda retry the event
	}
}

// shipTo returns the effect: a POST of what to the warehouse, which ships once per call.
func shipTo(url string) func(ctx context.Context, what string) error {
	return func(ctx context.Context, what string) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(what))
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			return fmt.Errorf("warehouse: %s", resp.Status)
		}
		return nil
	}
}

func main() {
	ctx := context.Background()
	var client *dynamodb.Client
	if ep := os.Getenv("IDEM_DYNAMODB_ENDPOINT"); ep != "" {
		client = dynamostore.LocalClient(ep, nil)
	} else {
		cfg, err := config.LoadDefaultConfig(ctx)
		if err != nil {
			log.Fatal(err)
		}
		client = dynamodb.NewFromConfig(cfg)
	}
	st, err := dynamostore.New(dynamostore.Options{Client: client, Table: cmp.Or(os.Getenv("IDEM_TABLE"), "idem")})
	if err != nil {
		log.Fatal(err)
	}
	eng, err := idem.New(st, idem.Options{})
	if err != nil {
		log.Fatal(err)
	}
	h, err := newHandler(os.Getenv("IDEM_EVENT_SOURCE"), eng, shipTo(os.Getenv("WAREHOUSE_URL")))
	if err != nil {
		log.Fatal(err)
	}
	lambda.Start(h)
}

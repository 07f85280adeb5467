// Command consumer-dynamostream sends each payment's receipt once, from a DynamoDB table's
// stream: the writer puts the payment and its "payment.created" event item in one transaction
// (TransactWriteItems), and a long-running worker (consumer/dynamostream) reads the table's
// stream and sends a receipt per event, keyed on the event id the writer put in the item, with
// its idem records in DynamoDB (store/dynamostore). There is no dual write: the payment and its
// event commit together or not at all.
//
// The same fact comes back three ways, and the run shows each: the writer retries a
// transaction whose answer it lost (its conditions refuse it: nothing is written), the writer
// rewrites an event item (a MODIFY of the same event id: its fingerprint is the fact, so it
// replays), and the first worker is killed halfway, so its successor reads again from its last
// checkpoint.
//
//	go run ./examples/consumer-dynamostream
//
// It needs DynamoDB with Streams: DynamoDB Local (IDEM_DYNAMODB_ENDPOINT, default
// http://127.0.0.1:8000; `make services` starts it). On AWS, build the clients with
// dynamodb.NewFromConfig(cfg) and dynamodbstreams.NewFromConfig(cfg), and keep the checkpoints
// in a table (consumer/dynamocheckpoints) so that workers share them.
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/consumer/dynamostream"
	"github.com/idemkit/idem/store/dynamostore"
)

// tables are the DynamoDB tables one run uses.
type tables struct{ Payments, Receipts, Idem string }

// summary is what a run did.
type summary struct {
	Payments                  int
	RetryRefused              bool
	Sent, Replays             int64
	Receipts, PaymentsWithOne int
	SentBeforeKill, Workers   int
	ReceiptsPerPayment        map[string]int // receipts sent, by payment id
	paymentIDs                []string
}

// change is the part of a stream record (dynamostream.Message's body) the consumer reads.
type change struct {
	NewImage struct {
		EventID   string `json:"event_id"`
		PaymentID string `json:"payment_id"`
	} `json:"new_image"`
}

func s(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }

// pay writes payment id and its event in one transaction; a second call for id is refused.
func pay(ctx context.Context, db *dynamodb.Client, table, id string, cents int) error {
	_, err := db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		{Put: &types.Put{TableName: aws.String(table), ConditionExpression: aws.String("attribute_not_exists(pk)"),
			Item: map[string]types.AttributeValue{"pk": s("payment#" + id), "sk": s("payment"),
				"cents": &types.AttributeValueMemberN{Value: strconv.Itoa(cents)}}}},
		{Put: &types.Put{TableName: aws.String(table), ConditionExpression: aws.String("attribute_not_exists(pk)"),
			Item: map[string]types.AttributeValue{"pk": s("payment#" + id), "sk": s("event#payment.created"),
				"event_id": s("payment.created/" + id), "payment_id": s(id)}}},
	}})
	return err
}

// run creates the tables, writes payments payments and their events, and sends their receipts
// with a worker killed halfway and one that takes over; it counts the receipts.
func run(ctx context.Context, db *dynamodb.Client, streams *dynamodbstreams.Client, t tables, payments int) (summary, error) {
	sm := summary{Payments: payments, ReceiptsPerPayment: map[string]int{}}
	arn, err := createTables(ctx, db, t)
	if err != nil {
		return sm, err
	}

	// The writer: each payment with its event, in one transaction.
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	for i := range payments {
		id := fmt.Sprintf("%s-%d", run, i)
		sm.paymentIDs = append(sm.paymentIDs, id)
		if err := pay(ctx, db, t.Payments, id, 1000+i); err != nil {
			return sm, err
		}
	}
	// The writer's retry of the first payment, its answer lost: refused, nothing written.
	var cancelled *types.TransactionCanceledException
	sm.RetryRefused = errors.As(pay(ctx, db, t.Payments, sm.paymentIDs[0], 1000), &cancelled)
	// The writer rewrites the second payment's event item: a second change of one fact.
	if _, err := db.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String(t.Payments),
		Key:              map[string]types.AttributeValue{"pk": s("payment#" + sm.paymentIDs[1]), "sk": s("event#payment.created")},
		UpdateExpression: aws.String("SET attempt = :a"), ExpressionAttributeValues: map[string]types.AttributeValue{":a": s("2")}}); err != nil {
		return sm, err
	}

	// The consumer. The key is the event id; a change of a payment item (no event id) is
	// keyed on itself and sends nothing. The fingerprint is the fact, not the whole change, so
	// the rewritten event item replays instead of conflicting with the first.
	st, err := dynamostore.New(dynamostore.Options{Client: db, Table: t.Idem})
	if err != nil {
		return sm, err
	}
	eng, err := idem.New(st, idem.Options{})
	if err != nil {
		return sm, err
	}
	parse := func(m *consumer.Message) (change, error) {
		var c change
		return c, json.Unmarshal(m.Body, &c)
	}
	var sent, replays atomic.Int64
	// The first worker is killed as it has just sent the receipt of half the payments: the
	// receipt is sent and its idem record completed, its checkpoint not yet saved, so the next
	// worker reads that change again. (A process killed while the receipt itself is being sent
	// is idem's at-least-once window: its record is taken over once its lease has run out, and
	// a receipt whose request reached DynamoDB is sent again. Keep such an effect in the store's
	// transaction where you can, as the SQL stores' transaction mode does.)
	half, killed := make(chan struct{}), make(chan struct{})
	c, err := consumer.New(consumer.Options{
		Runner: eng,
		Scope:  "receipts",
		Key: func(m *consumer.Message) (string, error) {
			ch, err := parse(m)
			if err != nil {
				return "", err
			}
			if ch.NewImage.EventID == "" {
				return "change/" + m.ID, nil
			}
			return ch.NewImage.EventID, nil
		},
		Fingerprint: func(m *consumer.Message) (string, error) {
			ch, err := parse(m)
			return idem.Fingerprint([]byte(ch.NewImage.EventID + "|" + ch.NewImage.PaymentID)), err
		},
		OnEvent: func(ev consumer.Event) {
			if ch, _ := parse(ev.Message); ch.NewImage.EventID == "" {
				return
			}
			switch ev.Outcome {
			case consumer.OutcomeExecuted:
				if sent.Add(1) == int64(payments/2) {
					close(half)
					<-killed // the worker is killed before it saves this record's checkpoint
				}
			case consumer.OutcomeReplay:
				replays.Add(1)
			}
		},
	}, func(ctx context.Context, m *consumer.Message) ([]byte, error) {
		ch, err := parse(m)
		if err != nil || ch.NewImage.EventID == "" {
			return nil, err // a payment item, not an event: nothing to send
		}
		// Send the receipt: here, count it in the receipts table.
		_, err = db.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String(t.Receipts),
			Key:              map[string]types.AttributeValue{"pk": s(ch.NewImage.PaymentID)},
			UpdateExpression: aws.String("ADD sent :one"), ExpressionAttributeValues: map[string]types.AttributeValue{":one": &types.AttributeValueMemberN{Value: "1"}}})
		return nil, err
	})
	if err != nil {
		return sm, err
	}
	cps := dynamostream.NewMemoryCheckpoints() // in a deployment: consumer/dynamocheckpoints
	start := func() (*dynamostream.Worker, error) {
		sm.Workers++
		return dynamostream.Start(ctx, c, dynamostream.Options{Client: streams, StreamARN: arn, Checkpoints: cps,
			PollInterval: 100 * time.Millisecond, LeaseDuration: 2 * time.Second,
			Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))})
	}
	first, err := start()
	if err != nil {
		return sm, err
	}
	select {
	case <-half:
	case <-time.After(time.Minute):
		close(killed) // a receipt that comes now does not wait for a kill
		first.Stop()
		return sm, fmt.Errorf("%d receipts sent in a minute, want %d", sent.Load(), payments/2)
	}
	first.Kill()
	sm.SentBeforeKill = int(sent.Load())
	close(killed)
	second, err := start()
	if err != nil {
		return sm, err
	}
	defer second.Stop()
	wait(func() bool { return sent.Load() >= int64(payments) && replays.Load() >= 2 })
	time.Sleep(300 * time.Millisecond) // room for a second receipt, were there one
	sm.Sent, sm.Replays = sent.Load(), replays.Load()

	out, err := db.Scan(ctx, &dynamodb.ScanInput{TableName: aws.String(t.Receipts), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return sm, err
	}
	for _, it := range out.Items {
		id := it["pk"].(*types.AttributeValueMemberS).Value
		n, _ := strconv.Atoi(it["sent"].(*types.AttributeValueMemberN).Value)
		sm.ReceiptsPerPayment[id] = n
		sm.Receipts += n
		if n == 1 {
			sm.PaymentsWithOne++
		}
	}
	return sm, nil
}

// wait polls ok for up to a minute.
func wait(ok func() bool) {
	for deadline := time.Now().Add(time.Minute); !ok() && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
}

// createTables creates the payments table (pk, sk) with a stream of new images, the receipts
// table and the idem table, and returns the payments table's stream ARN.
func createTables(ctx context.Context, db *dynamodb.Client, t tables) (string, error) {
	attr := func(name string) types.AttributeDefinition {
		return types.AttributeDefinition{AttributeName: aws.String(name), AttributeType: types.ScalarAttributeTypeS}
	}
	out, err := db.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            aws.String(t.Payments),
		AttributeDefinitions: []types.AttributeDefinition{attr("pk"), attr("sk")},
		KeySchema: []types.KeySchemaElement{{AttributeName: aws.String("pk"), KeyType: types.KeyTypeHash},
			{AttributeName: aws.String("sk"), KeyType: types.KeyTypeRange}},
		BillingMode:         types.BillingModePayPerRequest,
		StreamSpecification: &types.StreamSpecification{StreamEnabled: aws.Bool(true), StreamViewType: types.StreamViewTypeNewImage},
	})
	if err != nil {
		return "", err
	}
	if _, err := db.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            aws.String(t.Receipts),
		AttributeDefinitions: []types.AttributeDefinition{attr("pk")},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("pk"), KeyType: types.KeyTypeHash}},
		BillingMode:          types.BillingModePayPerRequest,
	}); err != nil {
		return "", err
	}
	st, err := dynamostore.New(dynamostore.Options{Client: db, Table: t.Idem})
	if err != nil {
		return "", err
	}
	return aws.ToString(out.TableDescription.LatestStreamArn), st.CreateTable(ctx, dynamostore.TableOptions{})
}

// deleteTables drops what createTables made.
func deleteTables(db *dynamodb.Client, t tables) {
	for _, name := range []string{t.Payments, t.Receipts, t.Idem} {
		_, _ = db.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: aws.String(name)})
	}
}

// localStreams is a DynamoDB Streams client of DynamoDB Local at endpoint.
func localStreams(endpoint string) *dynamodbstreams.Client {
	return dynamodbstreams.New(dynamodbstreams.Options{Region: "us-east-1", BaseEndpoint: aws.String(endpoint),
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: "local", SecretAccessKey: "local"}, nil
		})})
}

func main() {
	ctx := context.Background()
	ep := cmp.Or(os.Getenv("IDEM_DYNAMODB_ENDPOINT"), "http://127.0.0.1:8000")
	db := dynamostore.LocalClient(ep, nil)
	sfx := strconv.FormatInt(time.Now().Unix(), 36) // new tables for each run
	t := tables{Payments: "example_payments_" + sfx, Receipts: "example_receipts_" + sfx, Idem: "example_idem_" + sfx}
	defer deleteTables(db, t)
	sm, err := run(ctx, db, localStreams(ep), t, 10)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%d payments, each with its event in one transaction; the writer's retry refused: %v\n", sm.Payments, sm.RetryRefused)
	fmt.Printf("%d receipts sent (%d before the first worker was killed), %d event changes replayed\n",
		sm.Sent, sm.SentBeforeKill, sm.Replays)
	fmt.Printf("%d receipts in the table, %d payments with exactly one\n", sm.Receipts, sm.PaymentsWithOne)
}

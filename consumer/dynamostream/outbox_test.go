package dynamostream_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/consumer/dynamostream"
	"github.com/idemkit/idem/store/memstore"
)

// Write the item and the event with it, consume the stream idempotently: each payment and its
// "payment.created" event are written in one transaction; a writer's retry of the transaction
// (its answer lost) writes nothing more; a writer that rewrites the event item (a second change
// of one fact, in the stream twice) and a worker killed between the receipt and its checkpoint
// (its successor reads the record again) each leave the receipt sent once per payment.
func TestOutboxEndToEnd(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	pay := func(id string, cents int) error {
		s := func(v string) ddbtypes.AttributeValue { return &ddbtypes.AttributeValueMemberS{Value: v} }
		_, err := b.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []ddbtypes.TransactWriteItem{
			{Put: &ddbtypes.Put{TableName: aws.String(b.table), ConditionExpression: aws.String("attribute_not_exists(pk)"),
				Item: map[string]ddbtypes.AttributeValue{"pk": s("payment#" + id), "sk": s("payment"),
					"cents": &ddbtypes.AttributeValueMemberN{Value: strconv.Itoa(cents)}}}},
			{Put: &ddbtypes.Put{TableName: aws.String(b.table), ConditionExpression: aws.String("attribute_not_exists(pk)"),
				Item: map[string]ddbtypes.AttributeValue{"pk": s("payment#" + id), "sk": s("event#payment.created"),
					"event_id": s("payment.created/" + id), "payment_id": s(id)}}},
		}})
		return err
	}
	ids := []string{"p-1", "p-2", "p-3", "p-4", "p-5"}
	for _, id := range ids {
		if err := pay(id, 1000); err != nil {
			t.Fatal(err)
		}
	}
	// The writer's retry of p-1 (its answer lost): the transaction is refused, nothing written.
	var cancelled *ddbtypes.TransactionCanceledException
	if err := pay("p-1", 1000); !errors.As(err, &cancelled) {
		t.Fatalf("retried transaction: %v, want it cancelled by its condition", err)
	}
	// A writer that rewrites p-2's event item: a MODIFY of the same fact.
	if _, err := b.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String(b.table),
		Key:              map[string]ddbtypes.AttributeValue{"pk": &ddbtypes.AttributeValueMemberS{Value: "payment#p-2"}, "sk": &ddbtypes.AttributeValueMemberS{Value: "event#payment.created"}},
		UpdateExpression: aws.String("SET attempt = :a"), ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":a": &ddbtypes.AttributeValueMemberN{Value: "2"}}}); err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	receipts := map[string]int{}
	eng, err := idem.New(memstore.New(), idem.Options{})
	if err != nil {
		t.Fatal(err)
	}
	type change struct {
		NewImage struct {
			EventID   string `json:"event_id"`
			PaymentID string `json:"payment_id"`
		} `json:"new_image"`
	}
	parse := func(m *consumer.Message) (change, error) {
		var c change
		return c, json.Unmarshal(m.Body, &c)
	}
	c, err := consumer.New(consumer.Options{Runner: eng, Scope: "receipts", Logger: quiet(),
		Key: func(m *consumer.Message) (string, error) {
			ch, err := parse(m)
			if err != nil {
				return "", err
			}
			if ch.NewImage.EventID == "" {
				return "change/" + m.ID, nil // a business item's change: keyed on itself
			}
			return ch.NewImage.EventID, nil // the fact, whichever change carries it
		},
		Fingerprint: func(m *consumer.Message) (string, error) {
			ch, err := parse(m)
			return idem.Fingerprint([]byte(ch.NewImage.EventID + "|" + ch.NewImage.PaymentID)), err
		}}, func(ctx context.Context, m *consumer.Message) ([]byte, error) {
		ch, err := parse(m)
		if err != nil || ch.NewImage.EventID == "" {
			return nil, err // a business item, not an event: nothing to send
		}
		mu.Lock()
		receipts[ch.NewImage.PaymentID]++
		mu.Unlock()
		return nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	cps := dynamostream.NewMemoryCheckpoints()
	start := func(crashAt string) *dynamostream.Worker {
		opt := dynamostream.Options{Client: b.streams, StreamARN: b.arn, Checkpoints: cps,
			PollInterval: 50 * time.Millisecond, LeaseDuration: 600 * time.Millisecond, Logger: quiet()}
		if crashAt != "" {
			opt = dynamostream.WithBeforeAck(opt, func() bool {
				mu.Lock()
				defer mu.Unlock()
				return receipts[crashAt] > 0 // killed after p-3's receipt, before its checkpoint
			})
		}
		w, err := dynamostream.Start(ctx, c, opt)
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	first := start("p-3")
	select {
	case <-first.Done():
	case <-ctx.Done():
		t.Fatal("the first worker was never killed")
	}
	second := start("")
	defer second.Stop()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		mu.Lock()
		n := len(receipts)
		mu.Unlock()
		if n == len(ids) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("receipts for %d of %d payments", n, len(ids))
		}
	}
	time.Sleep(500 * time.Millisecond) // the MODIFY of p-2 and any straggler
	second.Stop()
	mu.Lock()
	defer mu.Unlock()
	for _, id := range ids {
		if receipts[id] != 1 {
			t.Errorf("%s: %d receipts, want 1", id, receipts[id])
		}
	}
}

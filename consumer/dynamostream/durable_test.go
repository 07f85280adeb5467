package dynamostream_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/consumer/dynamocheckpoints"
	"github.com/idemkit/idem/consumer/dynamostream"
	"github.com/idemkit/idem/store/memstore"
)

// A worker stopped and started again in a new process, its checkpoints in a DynamoDB table,
// reads on after them: each change is handled once, although each run has an idem store of
// its own (standing for keys the store no longer keeps), so a change read again would run
// again.
func TestRestartResumesAfterCheckpoint(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	table := "idem_checkpoints_" + randHex(6)
	open := func() *dynamocheckpoints.Checkpoints {
		cps, err := dynamocheckpoints.New(dynamocheckpoints.Options{Client: b.db, Table: table, Application: "receipts"})
		if err != nil {
			t.Fatal(err)
		}
		return cps
	}
	if err := open().CreateTable(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = b.db.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: aws.String(table)})
	})

	put := func(from, to int) {
		for i := from; i < to; i++ {
			s := func(v string) ddbtypes.AttributeValue { return &ddbtypes.AttributeValueMemberS{Value: v} }
			if _, err := b.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(b.table),
				Item: map[string]ddbtypes.AttributeValue{"pk": s(fmt.Sprint("order#", i)), "sk": s("order"), "id": s(fmt.Sprint("o", i))}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	var mu sync.Mutex
	runs := map[string]int{}
	run := func() *dynamostream.Worker {
		eng, err := idem.New(memstore.New(), idem.Options{})
		if err != nil {
			t.Fatal(err)
		}
		id := func(m *consumer.Message) (string, error) {
			var ch struct {
				NewImage struct{ ID string } `json:"new_image"`
			}
			return ch.NewImage.ID, json.Unmarshal(m.Body, &ch)
		}
		c, err := consumer.New(consumer.Options{Runner: eng, Logger: quiet(), Key: id}, func(_ context.Context, m *consumer.Message) ([]byte, error) {
			k, _ := id(m)
			mu.Lock()
			runs[k]++
			mu.Unlock()
			return nil, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		w, err := dynamostream.Start(ctx, c, dynamostream.Options{Client: b.streams, StreamARN: b.arn, Checkpoints: open(),
			PollInterval: 50 * time.Millisecond, LeaseDuration: 3 * time.Second, Logger: quiet()})
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	wait := func(n int) {
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
			mu.Lock()
			got := len(runs)
			mu.Unlock()
			if got >= n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("handled %d of %d changes", got, n)
			}
		}
	}
	put(0, 10)
	w := run()
	wait(10)
	w.Stop()
	put(10, 20)
	w = run()
	defer w.Stop()
	wait(20)
	time.Sleep(300 * time.Millisecond) // time to read anything else
	w.Stop()
	mu.Lock()
	defer mu.Unlock()
	for i := range 20 {
		if n := runs[fmt.Sprint("o", i)]; n != 1 {
			t.Errorf("change o%d ran %d times, want once", i, n)
		}
	}
}

package dynamostore_test

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/dynamostore"
)

// TestSharedTableLeavesOtherItemsAlone: in a single-table design, the application's items
// beside idem's are never written, expired or deleted by the store — not an item in the
// same partition as an idem record (another sort key), not an item under another prefix
// with idem's sort key, even when both carry attributes named like idem's (expires_at,
// token) and the table's TTL attribute in the past. Reserve, Complete, Release, a record's
// expiry and Sweep run to their end around them; each item reads back exactly as written.
func TestSharedTableLeavesOtherItemsAlone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const prefix = "IDEM#"
	b := setup(t, dynamostore.Options{PartitionKey: "PK", SortKey: "SK", SortKeyValue: "IDEM", TTLAttribute: "expiry", KeyPrefix: prefix})
	s := func(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
	n := func(v string) types.AttributeValue { return &types.AttributeValueMemberN{Value: v} }
	business := []map[string]types.AttributeValue{
		// The partition of idem's record for key "order-1", under another sort key.
		{"PK": s(prefix + "order-1"), "SK": s("ORDER"), "amount": n("100"), "expires_at": n("1"), "token": n("7"), "expiry": n("1")},
		// idem's sort key value, under another prefix.
		{"PK": s("ORDER#order-1"), "SK": s("IDEM"), "status": s("paid"), "expires_at": n("1"), "token": n("7"), "expiry": n("1")},
		// A plain item of the application.
		{"PK": s("CUSTOMER#42"), "SK": s("PROFILE"), "name": s("Ada")},
	}
	for _, it := range business {
		if _, err := b.client.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(b.table), Item: it}); err != nil {
			t.Fatal(err)
		}
	}

	fp := idem.Fingerprint([]byte("charge"))
	now := time.Now()
	for _, key := range []string{"order-1", "order-2"} {
		res, err := b.store.Reserve(ctx, idem.ReserveRequest{Key: key, Fingerprint: fp, Now: now, Lease: time.Minute, TTL: time.Second})
		if err != nil || !res.Claimed {
			t.Fatalf("Reserve %s = %+v, %v", key, res, err)
		}
		if key == "order-1" {
			err = b.store.Complete(ctx, key, res.Record.Token, idem.Response{Status: 201, Body: []byte("ok")}, now, now.Add(time.Second))
		} else {
			err = b.store.Release(ctx, key, res.Record.Token)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	// Every idem record has expired an hour on: Sweep runs until it finds nothing.
	later := now.Add(time.Hour)
	swept := 0
	for i := 0; i < 20; i++ {
		got, err := b.store.Sweep(ctx, later, 100)
		if err != nil {
			t.Fatal(err)
		}
		if got == 0 {
			break
		}
		swept += got
	}
	if swept != 2 {
		t.Errorf("Sweep deleted %d records, want idem's 2", swept)
	}
	for _, key := range []string{"order-1", "order-2"} {
		if _, err := b.store.Get(ctx, key); err != idem.ErrNotFound {
			t.Errorf("Get %s after the sweep: %v, want ErrNotFound", key, err)
		}
	}
	for _, want := range business {
		out, err := b.client.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(b.table), ConsistentRead: aws.Bool(true),
			Key: map[string]types.AttributeValue{"PK": want["PK"], "SK": want["SK"]}})
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(out.Item, want) {
			t.Errorf("item %s/%s reads back with %d attributes (%v), want it untouched (%d)", sv(want["PK"]), sv(want["SK"]), len(out.Item), keys(out.Item), len(want))
		}
	}
}

// sv is a String attribute's value.
func sv(v types.AttributeValue) string {
	if s, ok := v.(*types.AttributeValueMemberS); ok {
		return s.Value
	}
	return fmt.Sprint(v)
}

// keys lists an item's attribute names, sorted.
func keys(it map[string]types.AttributeValue) []string {
	out := make([]string, 0, len(it))
	for k := range it {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

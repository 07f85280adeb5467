package dynamostore_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/dynamostore"
)

// TestStorageTTL: every write sets the item's TTL attribute to expires_at in Unix seconds
// (rounded up) plus TTLMargin, the unit DynamoDB's TTL reads. Seconds where milliseconds or
// microseconds stand would keep items for millennia; the other way round DynamoDB would delete
// live records. Each write path is checked: a claim, Complete, and an Extend beyond the window.
func TestStorageTTL(t *testing.T) {
	t.Parallel()
	const margin = 2 * time.Hour
	b := setup(t, dynamostore.Options{TTLMargin: margin})
	ctx := context.Background()
	now := time.Now().Truncate(time.Microsecond)
	check := func(what, key string, expires time.Time) {
		t.Helper()
		out, err := b.client.GetItem(ctx, &dynamodb.GetItemInput{
			TableName:      aws.String(b.table),
			Key:            map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: key}},
			ConsistentRead: aws.Bool(true),
		})
		if err != nil {
			t.Fatal(err)
		}
		n, ok := out.Item["ttl"].(*types.AttributeValueMemberN)
		if !ok {
			t.Fatalf("%s: item has no numeric ttl: %v", what, out.Item)
		}
		got, err := strconv.ParseInt(n.Value, 10, 64)
		want := (expires.UnixMicro()+999_999)/1_000_000 + int64(margin/time.Second)
		if err != nil || got != want {
			t.Errorf("%s: ttl %s, want %d (expires_at in Unix seconds, rounded up, plus TTLMargin)", what, n.Value, want)
		}
	}
	fp := idem.Fingerprint(nil)
	res, err := b.store.Reserve(ctx, idem.ReserveRequest{Key: "k", Fingerprint: fp, Now: now, Lease: time.Minute, TTL: 24 * time.Hour})
	if err != nil || !res.Claimed {
		t.Fatalf("Reserve = %+v, %v", res, err)
	}
	check("claim", "k", now.Add(24*time.Hour))
	if err := b.store.Complete(ctx, "k", res.Record.Token, idem.Response{Status: 200}, now, now.Add(48*time.Hour)); err != nil {
		t.Fatal(err)
	}
	check("Complete", "k", now.Add(48*time.Hour))
	res, err = b.store.Reserve(ctx, idem.ReserveRequest{Key: "e", Fingerprint: fp, Now: now, Lease: time.Minute, TTL: time.Hour})
	if err != nil || !res.Claimed {
		t.Fatalf("Reserve = %+v, %v", res, err)
	}
	if err := b.store.Extend(ctx, "e", res.Record.Token, now.Add(3*time.Hour)); err != nil {
		t.Fatal(err)
	}
	check("Extend beyond the window", "e", now.Add(3*time.Hour))
}

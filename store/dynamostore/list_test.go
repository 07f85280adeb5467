package dynamostore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/dynamostore"
)

// A table created without the listing index (by an earlier version of the store, or by other
// tools) gets it from CreateTable: records claimed before are listed once the index is built
// (they carry list_shard), and a record written without list_shard (by a version of the store
// that had no index) is listed once Complete rewrites it.
func TestListIndexAddedToExistingTable(t *testing.T) {
	t.Parallel()
	ep := endpoint(t)
	client := dynamostore.LocalClient(ep, sharedTransport)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	table := fmt.Sprintf("idemtest_listmigrate_%08x", rand.Uint32())
	_, err := client.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            aws.String(table),
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("pk"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("pk"), KeyType: types.KeyTypeHash}},
		BillingMode:          types.BillingModePayPerRequest,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = client.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: aws.String(table)})
	})
	st, err := dynamostore.New(dynamostore.Options{Client: client, Table: table})
	if err != nil {
		t.Fatal(err)
	}
	fp := idem.Fingerprint([]byte("x"))
	now := time.Now()
	if _, err := st.Reserve(ctx, idem.ReserveRequest{Key: "claimed-before", Fingerprint: fp, Now: now, Lease: time.Minute, TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	// A claim as a store without the index wrote it: no list_shard.
	tok := now.UnixMicro()
	n := func(v int64) types.AttributeValue {
		return &types.AttributeValueMemberN{Value: strconv.FormatInt(v, 10)}
	}
	_, err = client.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: "old"}, "fingerprint": &types.AttributeValueMemberS{Value: fp},
		"state": &types.AttributeValueMemberS{Value: "in_progress"}, "token": n(tok), "lease_until": n(now.Add(time.Minute).UnixMicro()),
		"attempts": n(1), "created_at": n(now.UnixMicro()), "expires_at": n(now.Add(time.Hour).UnixMicro()), "ttl": n(now.Add(2 * time.Hour).Unix()),
	}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.List(ctx, idem.ListQuery{}); err == nil {
		t.Fatal("List on a table without the listing index succeeded")
	}
	if err := st.CreateTable(ctx, dynamostore.TableOptions{}); err != nil {
		t.Fatalf("CreateTable on a table without the index: %v", err)
	}
	keys := func() []string {
		page, err := st.List(ctx, idem.ListQuery{})
		if err != nil {
			t.Fatal(err)
		}
		var ks []string
		for _, r := range page.Records {
			ks = append(ks, r.Key)
		}
		return ks
	}
	if got := keys(); !slices.Equal(got, []string{"claimed-before"}) {
		t.Errorf("listed %q after the index was added, want the record that carries list_shard", got)
	}
	if err := st.Complete(ctx, "old", tok, idem.Response{Status: 201}, now, now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if got := keys(); !slices.Equal(got, []string{"claimed-before", "old"}) {
		t.Errorf("listed %q after Complete rewrote the old record, want both", got)
	}
	// CreateTable again changes nothing.
	if err := st.CreateTable(ctx, dynamostore.TableOptions{}); err != nil {
		t.Fatal(err)
	}
}

// List reads records with Query and BatchGetItem only, never Scan.
func TestListNeverScans(t *testing.T) {
	t.Parallel()
	b := setup(t, dynamostore.Options{})
	ctx := context.Background()
	fp := idem.Fingerprint([]byte("x"))
	now := time.Now()
	for i := range 30 {
		if _, err := b.store.Reserve(ctx, idem.ReserveRequest{Key: fmt.Sprintf("k%02d", i), Fingerprint: fp, Now: now, Lease: time.Minute, TTL: time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	b.calls.take()
	page, err := b.store.List(ctx, idem.ListQuery{Limit: 10})
	if err != nil || len(page.Records) != 10 || page.Records[0].Key != "k00" || page.Next == "" {
		t.Fatalf("List = %+v, %v", page, err)
	}
	ops := b.calls.take()
	queries := 0
	for _, op := range ops {
		switch op {
		case "Query":
			queries++
		case "BatchGetItem":
		default:
			t.Errorf("List sent %s", op)
		}
	}
	if queries != dynamostore.ListShards {
		t.Errorf("a first page sent %d Queries, want one per shard (%d): %v", queries, dynamostore.ListShards, ops)
	}
}

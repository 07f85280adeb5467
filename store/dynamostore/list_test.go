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
// that had no index) too, since CreateTable gives it its list_shard with its list_created when
// it adds NewestIndex; Complete keeps it listed.
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
	if got := keys(); !slices.Equal(got, []string{"claimed-before", "old"}) {
		t.Errorf("listed %q after the indexes were added, want both records", got)
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

// A table created before NewestIndex existed (here: with ListIndex alone, its records without
// list_created, one of them without list_shard either, as versions of the store before
// either index wrote them) gets the index from CreateTable, and its records their
// list_created: every record is listed newest first, across pages, the newest first.
func TestNewestIndexAddedToExistingTable(t *testing.T) {
	t.Parallel()
	ep := endpoint(t)
	client := dynamostore.LocalClient(ep, sharedTransport)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	table := fmt.Sprintf("idemtest_newestmigrate_%08x", rand.Uint32())
	_, err := client.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName: aws.String(table),
		AttributeDefinitions: []types.AttributeDefinition{
			{AttributeName: aws.String("pk"), AttributeType: types.ScalarAttributeTypeS},
			{AttributeName: aws.String("list_shard"), AttributeType: types.ScalarAttributeTypeN},
		},
		KeySchema: []types.KeySchemaElement{{AttributeName: aws.String("pk"), KeyType: types.KeyTypeHash}},
		GlobalSecondaryIndexes: []types.GlobalSecondaryIndex{{
			IndexName: aws.String(dynamostore.ListIndex),
			KeySchema: []types.KeySchemaElement{
				{AttributeName: aws.String("list_shard"), KeyType: types.KeyTypeHash},
				{AttributeName: aws.String("pk"), KeyType: types.KeyTypeRange},
			},
			Projection: &types.Projection{ProjectionType: types.ProjectionTypeKeysOnly},
		}},
		BillingMode: types.BillingModePayPerRequest,
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
	base := time.Now().Truncate(time.Millisecond)
	var want []string
	for i := range 30 {
		k := fmt.Sprintf("old/%02d", 29-i) // key order is not creation order
		res, err := st.Reserve(ctx, idem.ReserveRequest{Key: k, Fingerprint: fp, Now: base.Add(time.Duration(i) * time.Millisecond), Lease: time.Minute, TTL: time.Hour})
		if err != nil || !res.Claimed {
			t.Fatalf("Reserve(%q) = %+v, %v", k, res, err)
		}
		if i%3 == 0 {
			if err := st.Complete(ctx, k, res.Record.Token, idem.Response{Status: 201}, base, base.Add(time.Hour)); err != nil {
				t.Fatal(err)
			}
		}
		// As the store wrote it before NewestIndex: no list_created; the first one from
		// before ListIndex too.
		remove := "REMOVE list_created"
		if i == 0 {
			remove += ", list_shard"
		}
		if _, err := client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName: aws.String(table), Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: k}},
			UpdateExpression: aws.String(remove),
		}); err != nil {
			t.Fatal(err)
		}
		want = append(want, k)
	}
	slices.Reverse(want)
	if _, err := st.List(ctx, idem.ListQuery{Order: idem.ListNewestFirst}); err == nil {
		t.Fatal("List newest first on a table without NewestIndex succeeded")
	}
	if err := st.CreateTable(ctx, dynamostore.TableOptions{}); err != nil {
		t.Fatalf("CreateTable on a table without NewestIndex: %v", err)
	}
	newest := func() []string {
		var ks []string
		q := idem.ListQuery{Order: idem.ListNewestFirst, Limit: 7}
		for range 100 {
			page, err := st.List(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range page.Records {
				ks = append(ks, r.Key)
			}
			if page.Next == "" {
				return ks
			}
			q.Cursor = page.Next
		}
		t.Fatal("more than 100 pages")
		return nil
	}
	if got := newest(); !slices.Equal(got, want) {
		t.Errorf("newest first after CreateTable added NewestIndex:\n got %q\nwant %q", got, want)
	}
	// A record claimed afterwards comes first; CreateTable again changes nothing.
	if _, err := st.Reserve(ctx, idem.ReserveRequest{Key: "new", Fingerprint: fp, Now: base.Add(time.Second), Lease: time.Minute, TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if err := st.CreateTable(ctx, dynamostore.TableOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := newest(); len(got) != len(want)+1 || got[0] != "new" {
		t.Errorf("newest first after a new claim: %q", got)
	}
}

// A newest-first page, like a key-order one, reads with Query and BatchGetItem only, one
// Query per shard, never Scan; and a record claimed anew after it expired is listed once,
// at its new creation time.
func TestNewestFirstNeverScans(t *testing.T) {
	t.Parallel()
	b := setup(t, dynamostore.Options{})
	ctx := context.Background()
	fp := idem.Fingerprint([]byte("x"))
	base := time.Now().Truncate(time.Millisecond)
	for i := range 30 {
		if _, err := b.store.Reserve(ctx, idem.ReserveRequest{Key: fmt.Sprintf("k%02d", i), Fingerprint: fp, Now: base.Add(time.Duration(i) * time.Millisecond), Lease: time.Millisecond, TTL: time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	// k00 expired long ago and claimed anew: the newest.
	if _, err := b.store.Reserve(ctx, idem.ReserveRequest{Key: "k00", Fingerprint: "other", Now: base.Add(2 * time.Hour), Lease: time.Minute, TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	b.calls.take()
	page, err := b.store.List(ctx, idem.ListQuery{Order: idem.ListNewestFirst, Limit: 10})
	if err != nil || len(page.Records) != 10 || page.Records[0].Key != "k00" || page.Records[1].Key != "k29" || page.Next == "" {
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
	var all []string
	for q := (idem.ListQuery{Order: idem.ListNewestFirst, Limit: 8}); ; {
		page, err := b.store.List(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range page.Records {
			all = append(all, r.Key)
		}
		if page.Next == "" {
			break
		}
		q.Cursor = page.Next
	}
	if len(all) != 30 || all[0] != "k00" || slices.Index(all[1:], "k00") >= 0 {
		t.Errorf("newest first listed %d records %q; want 30, k00 once and first", len(all), all)
	}
}

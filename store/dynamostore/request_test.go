package dynamostore_test

import (
	"bytes"
	"context"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/dynamostore"
	"github.com/idemkit/idem/store/storekit"
)

// TestRequestAttribute: a record claimed without a request has the same attributes as before
// requests were kept (no request attribute, through Complete); one with a request keeps its
// storekit encoding in a binary attribute, through Complete.
func TestRequestAttribute(t *testing.T) {
	t.Parallel()
	b := setup(t, dynamostore.Options{})
	ctx := context.Background()
	now := time.Now().Truncate(time.Microsecond)
	item := func(key string) map[string]types.AttributeValue {
		t.Helper()
		out, err := b.client.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(b.table),
			Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: key}}, ConsistentRead: aws.Bool(true)})
		if err != nil {
			t.Fatal(err)
		}
		return out.Item
	}
	// The attributes of a completed record without a route, as written without a request.
	before := []string{"attempts", "completed_at", "created_at", "expires_at", "fingerprint", "lease_until", "list_created", "list_shard", "pk",
		"response", "response_head", "starts", "state", "token", "ttl"}
	fp := idem.Fingerprint(nil)
	sent := &idem.Request{Method: "POST", Target: "/v1/orders", Body: []byte("b"), BodySize: 1}
	for _, tc := range []struct {
		key string
		req *idem.Request
	}{{"plain", nil}, {"kept", sent}} {
		res, err := b.store.Reserve(ctx, idem.ReserveRequest{Key: tc.key, Fingerprint: fp, Request: tc.req, Now: now, Lease: time.Minute, TTL: time.Hour})
		if err != nil || !res.Claimed {
			t.Fatalf("Reserve = %+v, %v", res, err)
		}
		if err := b.store.Complete(ctx, tc.key, res.Record.Token, idem.Response{Status: 201}, now, now.Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		it := item(tc.key)
		names := make([]string, 0, len(it))
		for n := range it {
			names = append(names, n)
		}
		slices.Sort(names)
		raw, has := it["request"]
		switch {
		case tc.req == nil && has:
			t.Errorf("%s: a record without a request has a request attribute: %v", tc.key, names)
		case tc.req == nil && !slices.Equal(names, before):
			t.Errorf("%s: attributes %v, want those of a completed record before requests were kept: %v", tc.key, names, before)
		case tc.req != nil:
			bin, ok := raw.(*types.AttributeValueMemberB)
			if !ok || !bytes.Equal(bin.Value, storekit.EncodeRequest(*sent)) {
				t.Errorf("%s: request attribute %v, want the encoding", tc.key, raw)
			}
		}
	}
}

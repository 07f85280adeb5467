package dynamostore_test

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/dynamostore"
)

// The benchmarks compare each store path with the raw SDK call of the same shape on the same
// client and table, in the same run: ratios, not absolute times, are what they measure
// (DynamoDB Local on a shared machine is no model of DynamoDB's latency).
//
//	go test -run '^$' -bench . -benchtime 3s ./store/dynamostore/

const benchParallelism = 8 // goroutines per GOMAXPROCS

var benchSeq atomic.Int64

func benchKey(prefix string) string { return prefix + strconv.FormatInt(benchSeq.Add(1), 10) }

// BenchmarkNewKey: claiming a new key (Reserve) against a conditional PutItem of an item of the
// same size with attribute_not_exists.
func BenchmarkNewKey(b *testing.B) {
	bb := setup(b, dynamostore.Options{})
	fp := idem.Fingerprint([]byte("bench"))
	now := time.Now()
	b.Run("raw-PutItem", func(b *testing.B) {
		b.SetParallelism(benchParallelism)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				item := rawItem(benchKey("raw-new-"), fp, now)
				_, err := bb.client.PutItem(context.Background(), &dynamodb.PutItemInput{
					TableName: &bb.table, Item: item,
					ConditionExpression:      aws.String("attribute_not_exists(#pk)"),
					ExpressionAttributeNames: map[string]string{"#pk": "pk"},
				})
				if err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	b.Run("store-Reserve", func(b *testing.B) {
		b.SetParallelism(benchParallelism)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				res, err := bb.store.Reserve(context.Background(), idem.ReserveRequest{Key: benchKey("st-new-"), Fingerprint: fp, Now: now, Lease: 30 * time.Second, TTL: time.Hour})
				if err != nil || !res.Claimed {
					b.Error(err, res.Claimed)
					return
				}
			}
		})
	})
}

// BenchmarkReplay: replaying a completed key (Reserve, whose condition fails and returns the
// record) against a strongly consistent GetItem of the same record, and against the same
// failing conditional PutItem issued raw.
func BenchmarkReplay(b *testing.B) {
	bb := setup(b, dynamostore.Options{})
	fp := idem.Fingerprint([]byte("bench"))
	now := time.Now()
	ctx := context.Background()
	resp := idem.Response{Status: 200, Header: map[string][]string{"Content-Type": {"application/json"}}, Body: []byte(`{"id":"ch_123","amount":1000,"currency":"eur"}`)}
	const hot = 64
	keys := make([]string, hot)
	for i := range keys {
		keys[i] = fmt.Sprintf("replay-%d", i)
		res, err := bb.store.Reserve(ctx, idem.ReserveRequest{Key: keys[i], Fingerprint: fp, Now: now, Lease: 30 * time.Second, TTL: time.Hour})
		if err != nil {
			b.Fatal(err)
		}
		if err := bb.store.Complete(ctx, keys[i], res.Record.Token, resp, now, now.Add(time.Hour)); err != nil {
			b.Fatal(err)
		}
	}
	var i atomic.Int64
	next := func() string { return keys[i.Add(1)%hot] }
	b.Run("raw-GetItem", func(b *testing.B) {
		b.SetParallelism(benchParallelism)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				out, err := bb.client.GetItem(ctx, &dynamodb.GetItemInput{TableName: &bb.table, ConsistentRead: aws.Bool(true),
					Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: next()}}})
				if err != nil || out.Item == nil {
					b.Error(err)
					return
				}
			}
		})
	})
	b.Run("raw-failing-PutItem", func(b *testing.B) {
		b.SetParallelism(benchParallelism)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				_, err := bb.client.PutItem(ctx, &dynamodb.PutItemInput{
					TableName: &bb.table, Item: rawItem(next(), fp, now),
					ConditionExpression:                 aws.String("attribute_not_exists(#pk)"),
					ExpressionAttributeNames:            map[string]string{"#pk": "pk"},
					ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
				})
				if err == nil {
					b.Error("conditional put succeeded")
					return
				}
			}
		})
	})
	b.Run("store-Reserve", func(b *testing.B) {
		b.SetParallelism(benchParallelism)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				res, err := bb.store.Reserve(ctx, idem.ReserveRequest{Key: next(), Fingerprint: fp, Now: now.Add(time.Second), Lease: 30 * time.Second, TTL: time.Hour})
				if err != nil || res.Claimed || res.Record.Response == nil {
					b.Error(err, res.Claimed)
					return
				}
			}
		})
	})
}

// BenchmarkDo: a whole new-key execution through the engine (claim, effect, completion: two
// requests) against a raw PutItem followed by a raw UpdateItem of the same item.
func BenchmarkDo(b *testing.B) {
	bb := setup(b, dynamostore.Options{})
	fp := idem.Fingerprint([]byte("bench"))
	now := time.Now()
	ctx := context.Background()
	body := []byte(`{"ok":true}`)
	b.Run("raw-PutItem+UpdateItem", func(b *testing.B) {
		b.SetParallelism(benchParallelism)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				k := benchKey("raw-do-")
				if _, err := bb.client.PutItem(ctx, &dynamodb.PutItemInput{TableName: &bb.table, Item: rawItem(k, fp, now),
					ConditionExpression: aws.String("attribute_not_exists(#pk)"), ExpressionAttributeNames: map[string]string{"#pk": "pk"}}); err != nil {
					b.Error(err)
					return
				}
				if _, err := bb.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: &bb.table,
					Key:                       map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: k}},
					UpdateExpression:          aws.String("SET #st = :done, #resp = :resp"),
					ConditionExpression:       aws.String("#tok = :tok"),
					ExpressionAttributeNames:  map[string]string{"#st": "state", "#resp": "response", "#tok": "token"},
					ExpressionAttributeValues: map[string]types.AttributeValue{":done": &types.AttributeValueMemberS{Value: "completed"}, ":resp": &types.AttributeValueMemberB{Value: body}, ":tok": &types.AttributeValueMemberN{Value: strconv.FormatInt(now.UnixMicro(), 10)}},
				}); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	eng, err := idem.New(bb.store, idem.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("engine-Do", func(b *testing.B) {
		b.SetParallelism(benchParallelism)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				res, err := eng.Do(ctx, benchKey("st-do-"), fp, func(context.Context) (idem.Response, error) {
					return idem.Response{Status: 200, Body: body}, nil
				})
				if err != nil || res.Replayed {
					b.Error(err)
					return
				}
			}
		})
	})
}

// rawItem is an item of the size and shape of a fresh claim.
func rawItem(key, fp string, now time.Time) map[string]types.AttributeValue {
	n := func(t time.Time) types.AttributeValue {
		return &types.AttributeValueMemberN{Value: strconv.FormatInt(t.UnixMicro(), 10)}
	}
	return map[string]types.AttributeValue{
		"pk":          &types.AttributeValueMemberS{Value: key},
		"fingerprint": &types.AttributeValueMemberS{Value: fp},
		"state":       &types.AttributeValueMemberS{Value: "in_progress"},
		"token":       n(now),
		"lease_until": n(now.Add(30 * time.Second)),
		"attempts":    &types.AttributeValueMemberN{Value: "1"},
		"created_at":  n(now),
		"expires_at":  n(now.Add(time.Hour)),
		"ttl":         &types.AttributeValueMemberN{Value: strconv.FormatInt(now.Add(2*time.Hour).Unix(), 10)},
	}
}

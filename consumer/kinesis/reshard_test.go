package kinesis_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awskinesis "github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/consumer/kinesis"
	"github.com/idemkit/idem/store/memstore"
)

// After a split, the parent shard's records are handled before its children's: each partition
// key's records are handled in the order they were put, across the reshard, and each once.
func TestReshardParentBeforeChildren(t *testing.T) {
	t.Parallel()
	client := kinesisClient(t)
	stream := newStream(t, client, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	keys := []string{"alice", "bob", "carol", "dave", "erin", "frank"}
	const perKey = 10 // records per key before the split, and as many after
	put := func(from int) {
		for n := from; n < from+perKey; n++ {
			for _, k := range keys {
				body, _ := json.Marshal(map[string]any{"id": fmt.Sprintf("%s-%d", k, n), "user": k, "n": n})
				if _, err := client.PutRecord(ctx, &awskinesis.PutRecordInput{StreamName: aws.String(stream), Data: body, PartitionKey: aws.String(k)}); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	put(0)
	shards, err := client.ListShards(ctx, &awskinesis.ListShardsInput{StreamName: aws.String(stream)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.SplitShard(ctx, &awskinesis.SplitShardInput{StreamName: aws.String(stream),
		ShardToSplit: shards.Shards[0].ShardId, NewStartingHashKey: aws.String("170141183460469231731687303715884105728")}); err != nil {
		t.Fatal(err)
	}
	waitActive(t, client, stream)
	put(perKey)
	if after, err := client.ListShards(ctx, &awskinesis.ListShardsInput{StreamName: aws.String(stream)}); err != nil || len(after.Shards) != 3 {
		t.Fatalf("after the split: %v shards, %v; want the parent and two children", len(after.Shards), err)
	}

	var mu sync.Mutex
	seen := map[string][]int{}
	runs := map[string]int{}
	eng, err := idem.New(memstore.New(), idem.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := consumer.New(consumer.Options{Runner: eng, Key: func(m *consumer.Message) (string, error) {
		var ev struct{ ID string }
		return ev.ID, json.Unmarshal(m.Body, &ev)
	}, Logger: quiet()}, func(ctx context.Context, m *consumer.Message) ([]byte, error) {
		var ev struct {
			ID, User string
			N        int
		}
		if err := json.Unmarshal(m.Body, &ev); err != nil {
			return nil, consumer.Reject(err)
		}
		mu.Lock()
		seen[ev.User] = append(seen[ev.User], ev.N)
		runs[ev.ID]++
		mu.Unlock()
		time.Sleep(time.Millisecond) // the parent takes a while: children read early would overtake it
		return nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	w, err := kinesis.Start(ctx, c, kinesis.Options{Client: client, Stream: stream, Limit: 5,
		PollInterval: 50 * time.Millisecond, LeaseDuration: 600 * time.Millisecond, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		mu.Lock()
		n := len(runs)
		mu.Unlock()
		if n == len(keys)*2*perKey {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("handled %d of %d records", n, len(keys)*2*perKey)
		}
	}
	w.Stop()
	mu.Lock()
	defer mu.Unlock()
	for _, k := range keys {
		if !slices.IsSorted(seen[k]) || len(seen[k]) != 2*perKey {
			t.Errorf("%s: handled in the order %v, want 0..%d in order", k, seen[k], 2*perKey-1)
		}
	}
	for id, n := range runs {
		if n != 1 {
			t.Errorf("%s ran %d times", id, n)
		}
	}
}

// Command consumer-redis charges orders from a Redis stream once per order, although every
// order is added three times (a producer retrying, each time under a new entry id) and two
// workers share the stream as consumers of one group.
//
//	go run ./examples/consumer-redis
//
// It needs Redis 7 (IDEM_REDIS_ADDR, default 127.0.0.1:6379). The idem records live in the same
// Redis (redisstore), so any number of worker processes can share them.
package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/consumer/redisstream"
	"github.com/idemkit/idem/store/redisstore"
)

func main() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: cmp.Or(os.Getenv("IDEM_REDIS_ADDR"), "127.0.0.1:6379"), ContextTimeoutEnabled: true})
	defer rdb.Close()

	run := fmt.Sprint(time.Now().UnixNano())
	store, err := redisstore.New(redisstore.Options{Client: rdb, Prefix: "example:idem:" + run + ":"})
	if err != nil {
		log.Fatal(err)
	}
	engine, err := idem.New(store, idem.Options{})
	if err != nil {
		log.Fatal(err)
	}
	// The effect: a charge per order, counted in a Redis hash.
	chargesKey := "example:charges:" + run
	var charged, skipped atomic.Int64
	c, err := consumer.New(consumer.Options{
		Runner: engine,
		Scope:  "billing",
		// Keyed on the order id field, never on the entry id.
		Key: func(m *consumer.Message) (string, error) {
			if id := m.Header["order_id"]; len(id) == 1 && id[0] != "" {
				return "order/" + id[0], nil
			}
			return "", errors.New("not an order")
		},
		OnEvent: func(ev consumer.Event) {
			switch ev.Outcome {
			case consumer.OutcomeExecuted:
				charged.Add(1)
			case consumer.OutcomeReplay:
				skipped.Add(1)
			}
		},
	}, func(ctx context.Context, m *consumer.Message) ([]byte, error) {
		id := m.Header["order_id"][0] // the key function has checked it
		if err := rdb.HIncrBy(ctx, chargesKey, id, 1).Err(); err != nil {
			return nil, err // released: the redelivery charges
		}
		return []byte("charge-" + id), nil
	})
	if err != nil {
		log.Fatal(err)
	}

	// A fresh stream; ten orders, each added three times.
	stream := "example:orders:" + run
	defer rdb.Del(context.Background(), stream, chargesKey)
	const orders, copies = 10, 3
	for range copies {
		for i := range orders {
			if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{
				"order_id", run + "-" + fmt.Sprint(i), "body", fmt.Sprintf(`{"cents":%d}`, 1000+i),
			}}).Err(); err != nil {
				log.Fatal(err)
			}
		}
	}

	// Two workers in one group, until every entry is settled.
	rctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for range 2 {
		w, err := redisstream.NewWorker(rdb, c, redisstream.Options{Stream: stream, Group: "billing", Block: 200 * time.Millisecond})
		if err != nil {
			log.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := w.Run(rctx); err != nil {
				log.Print(err)
			}
		}()
	}
	deadline := time.Now().Add(time.Minute)
	for charged.Load()+skipped.Load() < orders*copies && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	wg.Wait()

	counts, err := rdb.HGetAll(ctx, chargesKey).Result()
	if err != nil {
		log.Fatal(err)
	}
	n := 0
	for _, v := range counts {
		var k int
		_, _ = fmt.Sscan(v, &k)
		n += k
	}
	fmt.Printf("%d entries: %d orders charged, %d duplicates skipped; %d charges for %d orders in Redis\n",
		orders*copies, charged.Load(), skipped.Load(), n, len(counts))
}

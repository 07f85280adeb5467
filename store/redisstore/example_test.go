package redisstore_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/redisstore"
)

// A store on a standalone Redis behind an engine: the first call runs the effect, a retry
// with the same key replays its response in one round trip.
func Example() {
	// ContextTimeoutEnabled: a call ends at its context's deadline, not at go-redis's
	// ReadTimeout.
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	defer rdb.Close()
	st, err := redisstore.New(redisstore.Options{Client: rdb, Prefix: "payments:"})
	if err != nil {
		log.Fatal(err)
	}
	eng, err := idem.New(st, idem.Options{})
	if err != nil {
		log.Fatal(err)
	}
	fp := idem.Fingerprint([]byte(`{"amount":100}`))
	for range 2 {
		res, err := eng.Do(context.Background(), "order-42", fp, func(ctx context.Context) (idem.Response, error) {
			return idem.Response{Status: 201, Body: []byte("charged")}, nil
		})
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(res.Response.Status, string(res.Response.Body), res.Replayed)
	}
}

// On Redis Cluster the store is the same; only the client differs.
func ExampleNew_cluster() {
	rdb := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:                 []string{"127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003"},
		ContextTimeoutEnabled: true,
	})
	defer rdb.Close()
	st, err := redisstore.New(redisstore.Options{Client: rdb})
	if err != nil {
		log.Fatal(err)
	}
	_ = st
}

// Many goroutines on one store: with AutoPipeline their commands share a connection and go
// out together, each call still waiting for its own answer within its context's deadline.
func ExampleNew_autoPipeline() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close() // also stops the client's pipeliner
	st, err := redisstore.New(redisstore.Options{Client: rdb, AutoPipeline: true})
	if err != nil {
		log.Fatal(err)
	}
	eng, err := idem.New(st, idem.Options{StoreTimeout: 2 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	_ = eng // eng.Do from as many goroutines as the service runs
}

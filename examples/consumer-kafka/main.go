// Command consumer-kafka charges orders from a Kafka topic once per order, although every order
// is published three times (a producer retrying, each time at a new offset) and two workers
// share the topic's partitions as members of one consumer group.
//
//	go run ./examples/consumer-kafka
//
// It talks to the Kafka brokers in IDEM_KAFKA_BROKERS (comma-separated host:port) or, when that
// is unset, to kfake, an in-process Kafka-protocol broker it starts on 127.0.0.1. The idem
// records live in memory (memstore), shared by the two workers of this one process; several
// processes would share pgstore, redisstore or dynamostore instead.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/consumer/kafka"
	"github.com/idemkit/idem/store/memstore"
)

type order struct {
	ID    string `json:"order_id"`
	Cents int    `json:"cents"`
}

func main() {
	ctx := context.Background()
	brokers := strings.Split(os.Getenv("IDEM_KAFKA_BROKERS"), ",")
	if brokers[0] == "" {
		cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
		if err != nil {
			log.Fatal(err)
		}
		defer cluster.Close()
		brokers = cluster.ListenAddrs()
	}

	engine, err := idem.New(memstore.New(), idem.Options{})
	if err != nil {
		log.Fatal(err)
	}
	// The effect: a charge per order, counted here.
	var mu sync.Mutex
	charges := map[string]int{}
	var charged, skipped atomic.Int64
	c, err := consumer.New(consumer.Options{
		Runner: engine,
		Scope:  "billing",
		// Keyed on the order id, never on the record's offset.
		Key: func(m *consumer.Message) (string, error) {
			var o order
			if err := json.Unmarshal(m.Body, &o); err != nil || o.ID == "" {
				return "", errors.New("not an order")
			}
			return "order/" + o.ID, nil
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
		var o order
		_ = json.Unmarshal(m.Body, &o) // the key function has parsed it already
		mu.Lock()
		charges[o.ID]++
		mu.Unlock()
		return []byte("charge-" + o.ID), nil
	})
	if err != nil {
		log.Fatal(err)
	}

	// A fresh topic with four partitions; ten orders, each published three times.
	prod, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	if err != nil {
		log.Fatal(err)
	}
	defer prod.Close()
	run := fmt.Sprint(time.Now().UnixNano())
	topic := "example-orders-" + run
	adm := kadm.NewClient(prod)
	if _, err := adm.CreateTopic(ctx, 4, 1, nil, topic); err != nil {
		log.Fatal(err)
	}
	defer func() { _, _ = adm.DeleteTopic(context.Background(), topic) }()
	const orders, copies = 10, 3
	for range copies {
		for i := range orders {
			body, _ := json.Marshal(order{ID: run + "-" + fmt.Sprint(i), Cents: 1000 + i})
			if err := prod.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: body}).FirstErr(); err != nil {
				log.Fatal(err)
			}
		}
	}

	// Two workers in one consumer group, until every record is settled.
	rctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for range 2 {
		w, err := kafka.NewWorker(c, kafka.Options{},
			kgo.SeedBrokers(brokers...), kgo.ConsumerGroup("billing-"+run), kgo.ConsumeTopics(topic))
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

	mu.Lock()
	defer mu.Unlock()
	n := 0
	for _, k := range charges {
		n += k
	}
	fmt.Printf("%d records: %d orders charged, %d duplicates skipped; %d charges for %d orders\n",
		orders*copies, charged.Load(), skipped.Load(), n, len(charges))
}

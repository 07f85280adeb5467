package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/internal/testenv"
)

// Two POSTs with one key make one charge, one event and one receipt; the event delivered a
// second time (a relay that stopped between publishing it and marking it sent publishes it
// again) replays in the consumer and leaves one receipt. Several charges go through at once.
func TestOneChargeOneEventOneReceipt(t *testing.T) {
	pgURL, natsURL := testenv.PostgresURL(t), testenv.NATSURL(t)
	if pgURL == "" || natsURL == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db, err := pgxpool.New(ctx, pgURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	nc, err := nats.Connect(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	sfx := hex.EncodeToString(b[:])
	n := names{Charges: "example_charges_" + sfx, Receipts: "example_receipts_" + sfx, Idem: "example_idem_" + sfx,
		Outbox: "example_outbox_" + sfx, Stream: "EXAMPLE_CHARGES_" + sfx, Subject: "example.charges." + sfx}
	t.Cleanup(func() {
		for _, name := range []string{n.Charges, n.Receipts, n.Idem, n.Outbox} {
			_, _ = db.Exec(context.Background(), `DROP TABLE IF EXISTS `+pgx.Identifier{name}.Sanitize())
		}
		_ = js.DeleteStream(context.Background(), n.Stream)
	})

	var mu sync.Mutex
	outcomes := map[consumer.Outcome]int{}
	a, err := setup(ctx, db, js, n, func(ev consumer.Event) {
		mu.Lock()
		outcomes[ev.Outcome]++
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { a.Run(rctx); close(done) }()
	defer func() { stop(); <-done }()
	srv := httptest.NewServer(a.API)
	defer srv.Close()

	post := func(key string, amount int) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/charges", strings.NewReader(fmt.Sprintf(`{"customer":"c1","amount":%d}`, amount)))
		req.Header.Set("Authorization", "Bearer sk_test")
		req.Header.Set("Idempotency-Key", key)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Error(err)
			return 0, ""
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	const payers = 8
	var wg sync.WaitGroup
	for i := range payers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("pay-%d", i)
			s1, b1 := post(key, 1000+i)
			s2, b2 := post(key, 1000+i) // the client's retry: its answer was lost
			if s1 != http.StatusCreated || s2 != http.StatusCreated || b1 != b2 {
				t.Errorf("%s: %d %s then %d %s, want 201 twice with one body", key, s1, b1, s2, b2)
			}
		}()
	}
	wg.Wait()

	waitFor := func(what string, ok func(counts) bool) counts {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			c, err := a.counts(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if ok(c) {
				return c
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %+v", what, c)
			}
		}
	}
	waitFor("a receipt for every charge", func(c counts) bool { return c.Receipts >= payers })
	time.Sleep(300 * time.Millisecond) // room for a second receipt, were there one
	if c := waitFor("", func(counts) bool { return true }); c != (counts{payers, payers, payers}) {
		t.Fatalf("%+v after two POSTs with each of %d keys, want %d of each", c, payers, payers)
	}

	// Every event delivered again, as a relay that stopped after publishing, before marking
	// it sent, publishes it once more (with a new Nats-Msg-Id: outside the duplicate window).
	cons, err := js.OrderedConsumer(ctx, n.Stream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for range payers {
		m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatal(err)
		}
		again := &nats.Msg{Subject: m.Subject(), Header: m.Headers(), Data: m.Data()}
		again.Header.Del(jetstream.MsgIDHeader)
		if _, err := js.PublishMsg(ctx, again); err != nil {
			t.Fatal(err)
		}
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		mu.Lock()
		handled := outcomes[consumer.OutcomeExecuted] + outcomes[consumer.OutcomeReplay]
		mu.Unlock()
		if handled >= 2*payers {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d deliveries handled", handled, 2*payers)
		}
	}
	if c := waitFor("", func(counts) bool { return true }); c != (counts{payers, payers, payers}) {
		t.Fatalf("%+v after every event was delivered twice, want %d of each", c, payers)
	}
	mu.Lock()
	defer mu.Unlock()
	if outcomes[consumer.OutcomeExecuted] != payers || outcomes[consumer.OutcomeReplay] != payers {
		t.Errorf("consumer outcomes %v, want %d executed and %d replays", outcomes, payers, payers)
	}
}

// Command payments-outbox takes payments over HTTP and sends each one's receipt exactly once,
// through a transactional outbox:
//
//  1. POST /charges writes the charge row, its idempotency record and its "charge.created"
//     event in one PostgreSQL transaction (pgstore.TxRunner + pgoutbox.Add): the three commit
//     together or not at all, so there is never a charge without its event, nor an event for
//     a charge that rolled back; a retry with the same Idempotency-Key replays the answer and
//     writes nothing.
//  2. A relay (outbox.Relay + natsout) publishes the events to NATS JetStream, at least once
//     each, with the event's key in the Idempotency-Key header.
//  3. A consumer (consumer + natsjs) takes the key from that header and writes the receipt in
//     the same transaction as its own idempotency record: an event that arrives twice (the
//     relay stopped between publishing it and marking it sent) replays, and the receipt is
//     written once.
//
// It needs PostgreSQL (IDEM_POSTGRES_URL, default postgres://postgres@127.0.0.1:5432/test) and
// NATS with JetStream (IDEM_NATS_URL, default nats://127.0.0.1:4222).
//
//	go run ./examples/payments-outbox                  # two POSTs with one key, then the counts
//	go run ./examples/payments-outbox -listen :8080    # serve POST /charges, relay and consumer
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/consumer/natsjs"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/outbox"
	"github.com/idemkit/idem/outbox/natsout"
	"github.com/idemkit/idem/outbox/pgoutbox"
	"github.com/idemkit/idem/store/pgstore"
)

// scopeSecret keys the HMAC that turns the caller's API key into its scope. In a real service
// it comes from a secret store, the same for every server that shares the idem store.
var scopeSecret = []byte("example scope secret of 32 bytes")

// names are the tables and the stream one app uses.
type names struct {
	Charges, Receipts, Idem, Outbox string // PostgreSQL tables
	Stream, Subject                 string // the JetStream stream and its subject
}

// chargeCreated is the body of a "charge.created" event.
type chargeCreated struct {
	Charge   int64  `json:"charge"`
	Customer string `json:"customer"`
	Amount   int64  `json:"amount"`
}

// app is the payments API, its relay and its receipts consumer.
type app struct {
	db       *pgxpool.Pool
	n        names
	charges  string // quoted table names
	receipts string
	outbox   pgoutbox.Options

	API      http.Handler       // POST /charges
	Relay    *outbox.Relay      // publishes the outbox's events to NATS
	Receipts *consumer.Consumer // writes each charge's receipt once
	cons     jetstream.Consumer
}

// setup creates the tables and the stream (if missing) and wires the three parts together.
// onReceipt, if set, sees every handling of a "charge.created" event (Executed, Replay, ...).
func setup(ctx context.Context, db *pgxpool.Pool, js jetstream.JetStream, n names, onReceipt func(consumer.Event)) (*app, error) {
	a := &app{db: db, n: n, charges: pgx.Identifier{n.Charges}.Sanitize(), receipts: pgx.Identifier{n.Receipts}.Sanitize(),
		outbox: pgoutbox.Options{Table: n.Outbox}}
	if _, err := db.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+a.charges+` (
		id bigserial PRIMARY KEY, customer text NOT NULL, amount bigint NOT NULL)`); err != nil {
		return nil, err
	}
	if _, err := db.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+a.receipts+` (
		id bigserial PRIMARY KEY, charge bigint NOT NULL, text text NOT NULL)`); err != nil {
		return nil, err
	}
	if err := pgoutbox.Migrate(ctx, db, a.outbox); err != nil {
		return nil, err
	}
	st, err := pgstore.New(db, pgstore.Options{Table: n.Idem})
	if err != nil {
		return nil, err
	}
	if err := st.Migrate(ctx); err != nil {
		return nil, err
	}
	// One TxRunner serves both sides: the API's records and the consumer's live in one table,
	// apart by scope (the caller's HMACed API key; "receipts").
	runner := pgstore.NewTxRunner(st, pgstore.TxOptions{})

	// 1. The API.
	mw, err := idemhttp.New(idemhttp.Options{
		Runner:     runner,
		RequireKey: true,
		Scope:      idemhttp.KeyedHeaderScope("Authorization", scopeSecret),
	})
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("POST /charges", mw(http.HandlerFunc(a.createCharge)))
	a.API = mux

	// 2. The relay, from the outbox table to the stream. The stream's duplicate window
	// (natsout sets Nats-Msg-Id) drops most second publishes; the consumer's records the rest.
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: n.Stream, Subjects: []string{n.Subject}}); err != nil {
		return nil, err
	}
	pub, err := natsout.New(js, n.Outbox)
	if err != nil {
		return nil, err
	}
	box, err := pgoutbox.New(db, a.outbox)
	if err != nil {
		return nil, err
	}
	if a.Relay, err = outbox.NewRelay(box, pub, outbox.RelayOptions{Interval: 50 * time.Millisecond}); err != nil {
		return nil, err
	}

	// 3. The receipts consumer, keyed on the event's idempotency key, in transaction mode.
	a.Receipts, err = consumer.New(consumer.Options{
		Runner:  runner,
		Scope:   "receipts",
		Key:     func(m *consumer.Message) (string, error) { return outbox.KeyOf(m.Header) },
		OnEvent: onReceipt,
	}, a.sendReceipt)
	if err != nil {
		return nil, err
	}
	a.cons, err = js.CreateOrUpdateConsumer(ctx, n.Stream, jetstream.ConsumerConfig{
		Durable: "receipts", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second,
	})
	return a, err
}

// createCharge writes the charge and its event through the request's transaction: they commit
// with the idempotency record, or, if this handler answers 5xx or panics, none of them does.
func (a *app) createCharge(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Customer string `json:"customer"`
		Amount   int64  `json:"amount"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.Customer == "" || in.Amount <= 0 {
		http.Error(w, "want {\"customer\": ..., \"amount\": > 0}", http.StatusBadRequest)
		return
	}
	ctx := r.Context()
	tx := pgstore.TxFromContext(ctx)
	ev := chargeCreated{Customer: in.Customer, Amount: in.Amount}
	if err := tx.QueryRow(ctx, `INSERT INTO `+a.charges+` (customer, amount) VALUES ($1, $2) RETURNING id`,
		in.Customer, in.Amount).Scan(&ev.Charge); err != nil {
		http.Error(w, "could not charge", http.StatusInternalServerError)
		return
	}
	body, _ := json.Marshal(ev)
	err := pgoutbox.Add(ctx, tx, a.outbox, outbox.Message{
		Key:   fmt.Sprintf("charge/%d/created", ev.Charge), // the fact: every copy of the event has it
		Topic: a.n.Subject,
		Body:  body,
	})
	if err != nil {
		http.Error(w, "could not charge", http.StatusInternalServerError) // rolls the charge back too
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write(body)
}

// sendReceipt writes the receipt of a "charge.created" event in the consumer's transaction,
// which commits with the event's idempotency record: a second copy of the event replays.
func (a *app) sendReceipt(ctx context.Context, m *consumer.Message) ([]byte, error) {
	var ev chargeCreated
	if err := json.Unmarshal(m.Body, &ev); err != nil || ev.Charge == 0 {
		return nil, consumer.Reject(errors.New("not a charge.created event"))
	}
	tx := pgstore.TxFromContext(ctx)
	var id int64
	if err := tx.QueryRow(ctx, `INSERT INTO `+a.receipts+` (charge, text) VALUES ($1, $2) RETURNING id`,
		ev.Charge, fmt.Sprintf("%s paid %d.%02d", ev.Customer, ev.Amount/100, ev.Amount%100)).Scan(&id); err != nil {
		return nil, err
	}
	return fmt.Appendf(nil, "receipt %d", id), nil
}

// Run runs the relay and the receipts consumer until ctx ends.
func (a *app) Run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _ = a.Relay.Run(ctx) }()
	go func() {
		defer wg.Done()
		if err := natsjs.Run(ctx, a.cons, a.Receipts, natsjs.Options{}); err != nil && ctx.Err() == nil {
			log.Print(err)
		}
	}()
	wg.Wait()
}

// counts is how many rows each table holds.
type counts struct{ Charges, Events, Receipts int }

func (a *app) counts(ctx context.Context) (counts, error) {
	var c counts
	err := a.db.QueryRow(ctx, `SELECT (SELECT count(*) FROM `+a.charges+`), (SELECT count(*) FROM `+
		pgx.Identifier{a.n.Outbox}.Sanitize()+`), (SELECT count(*) FROM `+a.receipts+`)`).Scan(&c.Charges, &c.Events, &c.Receipts)
	return c, err
}

func main() {
	listen := flag.String("listen", "", "serve on this address instead of running the demo")
	flag.Parse()
	ctx := context.Background()
	db, err := pgxpool.New(ctx, cmp.Or(os.Getenv("IDEM_POSTGRES_URL"), "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	nc, err := nats.Connect(cmp.Or(os.Getenv("IDEM_NATS_URL"), nats.DefaultURL))
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	a, err := setup(ctx, db, js, names{Charges: "example_charges", Receipts: "example_receipts", Idem: "example_charges_idem",
		Outbox: "example_charges_outbox", Stream: "EXAMPLE_CHARGES", Subject: "example.charges.created"}, nil)
	if err != nil {
		log.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	go a.Run(rctx)
	if *listen != "" {
		log.Fatal(http.ListenAndServe(*listen, a.API))
	}

	srv := httptest.NewServer(a.API)
	defer srv.Close()
	before, err := a.counts(ctx)
	if err != nil {
		log.Fatal(err)
	}
	key := fmt.Sprintf("charge-%d", before.Charges) // a new key for each run of the demo
	for range 2 {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/charges", strings.NewReader(`{"customer":"c1","amount":4200}`))
		req.Header.Set("Authorization", "Bearer sk_demo")
		req.Header.Set("Idempotency-Key", key)
		resp, err := srv.Client().Do(req)
		if err != nil {
			log.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Printf("%s replayed=%q %s\n", resp.Status, resp.Header.Get(idemhttp.ReplayedHeader), body)
	}
	after := before
	for deadline := time.Now().Add(10 * time.Second); after.Receipts == before.Receipts && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if after, err = a.counts(ctx); err != nil {
			log.Fatal(err)
		}
	}
	time.Sleep(200 * time.Millisecond) // room for a second receipt, were there one
	if after, err = a.counts(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("added by two POSTs with one key: %d charge, %d event, %d receipt\n",
		after.Charges-before.Charges, after.Events-before.Events, after.Receipts-before.Receipts)
}

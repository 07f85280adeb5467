//go:build chaos

package consumerchaos_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/idemkit/idem/internal/consumerchaos"
	"github.com/idemkit/idem/outbox"
	"github.com/idemkit/idem/outbox/amqpout"
	"github.com/idemkit/idem/outbox/natsout"
	"github.com/idemkit/idem/outbox/pgoutbox"
)

// The outbox source: instead of publishing to the broker, producers write each fact's
// business row and its event in one PostgreSQL transaction (pgoutbox.Add), and relay
// processes (the test binary run again with relayEnv set) publish the events with natsout or
// amqpout. The relays reach PostgreSQL and the broker through the run's fault relays, are
// killed (SIGKILL) and stopped past their lease (SIGSTOP) by the harness like the workers, and
// kill themselves between an event's publish and its mark-sent (at random, and at every 30th
// event once). The consumers key each event by its Idempotency-Key header. Each relay logs,
// one line each:
//
//	P <fact> <unix nanoseconds>     an event the broker accepted
//	K relay-between-steps <unix nanoseconds>
const relayEnv = "IDEM_CCHAOS_RELAY"

const (
	relays        = 2
	relayLease    = engineLease // a pause is longer
	relayKillRate = 0.04        // SIGKILL between an event's two steps (publish, mark-sent)
	relayKillEach = 30          // and, once each, at every 30th event (so every run has some)
	relayPrefix   = "cchaos"    // the Nats-Msg-Id prefix
	natsDupWindow = 100 * time.Millisecond
)

// topic is where the outbox events of b go.
func topic(b broker) string {
	switch b := b.(type) {
	case *natsBroker:
		return b.subject
	case *amqpBroker:
		return b.queue
	}
	panic(fmt.Sprintf("no outbox publisher for %T", b))
}

// setupOutbox creates the run's outbox and business tables. JetStream's duplicate window is
// made shorter than a relay's lease, so an event published again after a relay's death
// reaches the consumers (as it does after any outage longer than the window).
func (r *run) setupOutbox(ctx context.Context) {
	r.outbox = "cchaos_outbox_" + r.id
	r.payments = "cchaos_pay_" + r.id
	if err := pgoutbox.Migrate(ctx, r.db, pgoutbox.Options{Table: r.outbox}); err != nil {
		r.t.Fatal(err)
	}
	if _, err := r.db.Exec(ctx, "CREATE TABLE "+r.payments+" (fact text PRIMARY KEY, amount int NOT NULL)"); err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { _, _ = r.db.Exec(context.Background(), "DROP TABLE IF EXISTS "+r.outbox+", "+r.payments) })
	if b, ok := r.b.(*natsBroker); ok {
		s, err := b.js.Stream(ctx, b.stream)
		if err != nil {
			r.t.Fatal(err)
		}
		cfg := s.CachedInfo().Config
		cfg.Duplicates = natsDupWindow
		if _, err := b.js.UpdateStream(ctx, cfg); err != nil {
			r.t.Fatal(err)
		}
	}
}

// produce writes the facts at about 40 a second, each payment row and its event in one
// transaction (straight to PostgreSQL: the producers are not under fire).
func (r *run) produce() {
	ctx := context.Background()
	opt := pgoutbox.Options{Table: r.outbox}
	for i := range r.cfg.facts {
		f := fact{Fact: fmt.Sprintf("f%05d", i), Amount: 100 + i, Sent: time.Now().UnixNano()}
		body, _ := json.Marshal(f)
		tx, err := r.db.Begin(ctx)
		if err == nil {
			if _, err = tx.Exec(ctx, "INSERT INTO "+r.payments+" VALUES ($1, $2)", f.Fact, f.Amount); err == nil {
				err = pgoutbox.Add(ctx, tx, opt, outbox.Message{Key: f.Fact, Topic: topic(r.b), Body: body})
			}
			if err == nil {
				err = tx.Commit(ctx)
			} else {
				_ = tx.Rollback(ctx)
			}
		}
		if err != nil {
			r.t.Errorf("produce %s: %v", f.Fact, err)
			continue
		}
		r.mu.Lock()
		r.hist.Facts = append(r.hist.Facts, f.Fact) // its messages are the relays' publishes
		r.mu.Unlock()
		time.Sleep(25 * time.Millisecond)
	}
}

// unsent counts the outbox's events not marked sent.
func (r *run) unsent(ctx context.Context) int {
	var n int
	if err := r.db.QueryRow(ctx, "SELECT count(*) FROM "+r.outbox+" WHERE sent_at IS NULL").Scan(&n); err != nil {
		r.t.Fatal(err)
	}
	return n
}

// superviseRelays keeps n relay processes running, as supervise does workers.
func (r *run) superviseRelays(n int, stop chan struct{}) *sync.WaitGroup {
	var wg sync.WaitGroup
	for slot := range n {
		wg.Go(func() {
			for inc := 0; ; inc++ {
				if !r.relay(slot, fmt.Sprintf("r%d.%d", slot, inc), stop) {
					return
				}
			}
		})
	}
	return &wg
}

// relay runs one relay process until it dies (true) or stop is closed (false); relays have
// slots of their own, apart from the workers'.
func (r *run) relay(slot int, name string, stop chan struct{}) bool {
	env := map[string]string{
		"NAME": name, "BROKER": r.cfg.broker, "BROKER_URL": r.b.URL(r.busRelay.Addr()),
		"PG": withHost(r.pgURL, r.storeRelay.Addr()), "OUTBOX": r.outbox, "BUG": r.cfg.bug, "DIR": r.dir,
	}
	return r.process(100+slot, name, relayEnv, env, stop)
}

// relayMain is a relay process: an outbox.Relay on the run's outbox table, publishing with
// natsout or amqpout through the broker relay, until SIGTERM.
func relayMain() int {
	env := func(k string) string { return os.Getenv("IDEM_CCHAOS_" + k) }
	bug := env("BUG")
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	var db *pgxpool.Pool
	for {
		var err error
		if db, err = pgxpool.New(ctx, env("PG")); err == nil {
			break
		}
		if ctx.Err() != nil {
			return 0
		}
		time.Sleep(100 * time.Millisecond)
	}
	defer db.Close()
	st, err := pgoutbox.New(db, pgoutbox.Options{Table: env("OUTBOX")})
	if err != nil {
		fmt.Fprintln(os.Stderr, "relay:", err)
		return 2
	}
	var pub outbox.Publisher
	switch env("BROKER") {
	case "nats":
		pub, err = natsPublisher(env("BROKER_URL"))
	case "amqp":
		pub = &amqpPublisher{url: env("BROKER_URL")}
	default:
		err = fmt.Errorf("no outbox publisher for %q", env("BROKER"))
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "relay:", err)
		return 2
	}
	var store outbox.Store = st
	// dies reports whether the relay dies between the steps of m: at random, and the first
	// time any relay of the run gets there with every relayKillEach-th event (a file of the
	// run's directory marks it done), so that no run goes without.
	dies := func(m outbox.Message) bool {
		if rand.Float64() < relayKillRate {
			return true
		}
		if m.ID%relayKillEach != relayKillEach/2 {
			return false
		}
		f, err := os.OpenFile(filepath.Join(env("DIR"), fmt.Sprintf("relay-kill-%d", m.ID)), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if err != nil {
			return false
		}
		_ = f.Close()
		return true
	}
	step := outbox.PublisherFunc(func(ctx context.Context, m outbox.Message) error {
		// Now and then the relay dies between an event's two steps: after the broker took
		// it, before the relay's Sent.
		if bug == "sentfirst" {
			// Planted: the relay marks the event sent before it publishes it (and so dies,
			// now and then, between the mark and the publish).
			if err := st.Sent(ctx, m); err != nil {
				return err
			}
			if dies(m) {
				killSelf("relay-between-steps")
			}
		}
		if err := pub.Publish(ctx, m); err != nil {
			return err
		}
		var f fact
		_ = json.Unmarshal(m.Body, &f)
		logLine("P %s %d", f.Fact, time.Now().UnixNano())
		if bug != "sentfirst" && dies(m) {
			killSelf("relay-between-steps")
		}
		return nil
	})
	relay, err := outbox.NewRelay(store, step, outbox.RelayOptions{
		Batch: 20, Interval: 20 * time.Millisecond, Lease: relayLease, PublishTimeout: relayLease / 2,
		MinBackoff: 50 * time.Millisecond, MaxBackoff: 500 * time.Millisecond, Logger: quiet(),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "relay:", err)
		return 2
	}
	_ = relay.Run(ctx)
	return 0
}

// natsPublisher connects through the broker relay, reconnecting after each cut.
func natsPublisher(url string) (outbox.Publisher, error) {
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond), nats.Timeout(2*time.Second),
		nats.RetryOnFailedConnect(true))
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	return natsout.New(js, relayPrefix)
}

// amqpPublisher dials again after a cut closed its connection.
type amqpPublisher struct {
	url  string
	mu   sync.Mutex
	conn *amqp091.Connection
	pub  *amqpout.Publisher
}

func (p *amqpPublisher) Publish(ctx context.Context, m outbox.Message) error {
	p.mu.Lock()
	if p.conn == nil || p.conn.IsClosed() {
		conn, err := amqp091.DialConfig(p.url, amqp091.Config{Dial: amqp091.DefaultDial(2 * time.Second)})
		if err != nil {
			p.mu.Unlock()
			return err
		}
		ch, err := conn.Channel()
		if err == nil {
			p.pub, err = amqpout.New(ch, "")
		}
		if err != nil {
			_ = conn.Close()
			p.mu.Unlock()
			return err
		}
		p.conn = conn
	}
	pub := p.pub
	p.mu.Unlock()
	err := pub.Publish(ctx, m)
	if err != nil {
		p.mu.Lock()
		if p.conn != nil {
			_ = p.conn.Close() // a channel error closes the channel: start again
			p.conn = nil
		}
		p.mu.Unlock()
	}
	return err
}

// relayKills counts the kills of relay processes in a history (they never ran an effect, so
// the verdict excuses nothing by them).
func relayKills(h consumerchaos.History) int {
	n := 0
	for _, k := range h.Kills {
		if len(k.Worker) > 0 && k.Worker[0] == 'r' {
			n++
		}
	}
	return n
}

// TestOutboxChaos runs producer → outbox → relays → broker → consumers for each broker with
// an outbox publisher, under every fault the consumer runs get plus the relays' own (killed,
// killed between publish and mark-sent, stopped past their lease, cut from PostgreSQL and the
// broker). The verdict must be all zeros.
func TestOutboxChaos(t *testing.T) {
	facts := envInt("IDEM_CCHAOS_OUTBOX_FACTS", envInt("IDEM_CCHAOS_FACTS", 200))
	for _, b := range envList("IDEM_CCHAOS_OUTBOX_BROKERS", "nats,amqp") {
		for _, mode := range envList("IDEM_CCHAOS_OUTBOX_MODES", "tx") {
			t.Run(b+"/"+mode, func(t *testing.T) {
				var relayKilled int
				v := runChaos(t, config{broker: b, mode: consumerchaos.Mode(mode), facts: facts, source: "outbox"}, func(h consumerchaos.History) { relayKilled = relayKills(h) })
				if !v.OK() {
					t.Fatal("the verdict is not all zeros")
				}
				if relayKilled == 0 || v.Pauses == 0 || v.Cuts["store"] == 0 || v.Cuts["broker"] == 0 {
					t.Fatalf("the run injected too few faults to test anything: relay kills %d, pauses %d, cuts %v", relayKilled, v.Pauses, v.Cuts)
				}
			})
		}
	}
}

// TestOutboxChaosCatchesPlantedBugs runs the outbox source with a planted bug under the same
// faults: the verdict must fail, with the count the bug breaks.
func TestOutboxChaosCatchesPlantedBugs(t *testing.T) {
	facts := envInt("IDEM_CCHAOS_OUTBOX_SELFTEST_FACTS", 150)
	for _, tc := range []struct {
		name, broker, bug string
		broken            func(consumerchaos.Verdict) int
	}{
		// A relay that marks an event sent before publishing it loses the event when it dies,
		// or its publish fails, in between.
		{"sent-before-publish/nats", "nats", "sentfirst", func(v consumerchaos.Verdict) int { return v.Lost }},
		// A consumer keyed by the broker's id of a delivery (JetStream's stream sequence)
		// runs an event a relay published twice twice.
		{"keyed-by-transport-id/nats", "nats", "transportid", func(v consumerchaos.Verdict) int { return v.UnexplainedDoubles }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := runChaos(t, config{broker: tc.broker, mode: consumerchaos.Tx, facts: facts, bug: tc.bug, source: "outbox"}, nil)
			if v.OK() || tc.broken(v) == 0 {
				t.Fatalf("the planted bug %q went unnoticed", tc.bug)
			}
		})
	}
}

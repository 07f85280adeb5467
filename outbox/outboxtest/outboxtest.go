// Package outboxtest is the conformance suite of outbox.Store implementations: events added
// with a transaction, order per order key, concurrent relays, a stopped relay taken over, lag. Each
// outbox table package (pgoutbox, mysqloutbox, sqliteoutbox) runs it on its database; run it
// on a Store of your own the same way.
package outboxtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/outbox"
	"github.com/idemkit/idem/store/sweeper"
)

// Table is one fresh, empty outbox table.
type Table struct {
	// Store is the table as a relay reads it.
	Store outbox.Store
	// AddTx adds m in a transaction of the database that commits when commit is true and
	// rolls back otherwise, returning Add's error (before the commit or rollback).
	AddTx func(ctx context.Context, m outbox.Message, commit bool) error
	// Count returns how many events the table holds that are not sent yet, and how many
	// are marked sent.
	Count func(ctx context.Context) (unsent, sent int, err error)
	// Retention is the Store's: how long it keeps sent events before Sweep deletes them.
	Retention time.Duration
}

// An outbox is swept as idem records are.
var _ sweeper.Sweepable = outbox.Store(nil)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// Run runs the suite; newTable returns a fresh table for each test (dropped at its end).
func Run(t *testing.T, newTable func(t *testing.T) Table) {
	t.Run("AddCommitsWithTheTransaction", func(t *testing.T) { t.Parallel(); addCommits(t, newTable(t)) })
	t.Run("OrderPerKey", func(t *testing.T) { t.Parallel(); orderPerKey(t, newTable(t)) })
	t.Run("OrderPerOrderKey", func(t *testing.T) { t.Parallel(); orderPerOrderKey(t, newTable(t)) })
	t.Run("ConcurrentRelays", func(t *testing.T) { t.Parallel(); concurrentRelays(t, newTable(t)) })
	t.Run("ConcurrentClaims", func(t *testing.T) { t.Parallel(); concurrentClaims(t, newTable(t)) })
	t.Run("StoppedRelayIsTakenOver", func(t *testing.T) { t.Parallel(); stoppedRelay(t, newTable(t)) })
	t.Run("Lag", func(t *testing.T) { t.Parallel(); lag(t, newTable(t)) })
	t.Run("SentKeptThenSwept", func(t *testing.T) { t.Parallel(); sentKeptThenSwept(t, newTable(t)) })
	t.Run("PublishedNeverHandedOutAgain", func(t *testing.T) { t.Parallel(); publishedNeverAgain(t, newTable(t)) })
}

func add(t *testing.T, tb Table, key, body string) {
	t.Helper()
	if err := tb.AddTx(context.Background(), outbox.Message{Key: key, Topic: "t", Body: []byte(body), Header: map[string][]string{"X-Trace": {"abc"}}}, true); err != nil {
		t.Fatal(err)
	}
}

// count returns how many events are not sent yet.
func count(t *testing.T, tb Table) int {
	t.Helper()
	n, _ := counts(t, tb)
	return n
}

func counts(t *testing.T, tb Table) (unsent, sent int) {
	t.Helper()
	unsent, sent, err := tb.Count(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return unsent, sent
}

// An event added in a transaction that rolls back is never published; one in a transaction
// that commits is. An event without a key is refused.
func addCommits(t *testing.T, tb Table) {
	ctx := context.Background()
	for _, commit := range []bool{false, true} {
		if err := tb.AddTx(ctx, outbox.Message{Key: "order-1/paid", Topic: "orders", Body: []byte("{}")}, commit); err != nil {
			t.Fatal(err)
		}
	}
	if n := count(t, tb); n != 1 {
		t.Fatalf("%d events in the outbox, want 1 (the committed one)", n)
	}
	if err := tb.AddTx(ctx, outbox.Message{Topic: "orders"}, true); !errors.Is(err, idem.ErrInvalidInput) {
		t.Fatalf("an event without a key: %v, want ErrInvalidInput", err)
	}
}

// recorder is a publisher that notes every publish it accepted, and fails as told.
type recorder struct {
	mu   sync.Mutex
	got  []outbox.Message
	fail func(m outbox.Message) (deliver bool, err error)
}

func (r *recorder) Publish(_ context.Context, m outbox.Message) error {
	deliver, err := true, error(nil)
	if r.fail != nil {
		deliver, err = r.fail(m)
	}
	if deliver {
		r.mu.Lock()
		r.got = append(r.got, m)
		r.mu.Unlock()
	}
	return err
}

func bodies(ms []outbox.Message) []string {
	var out []string
	for _, m := range ms {
		out = append(out, string(m.Body))
	}
	return out
}

// drain runs relay's rounds until tb has no unsent event, for at most 10s.
func drain(t *testing.T, tb Table, relay *outbox.Relay, pub *recorder) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for count(t, tb) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("outbox not drained; published %v", bodies(pub.got))
		}
		if _, err := relay.Round(context.Background()); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A key's later events wait while its first one fails, and are published in the order they
// were added; other keys' events are not held up.
func orderPerKey(t *testing.T, tb Table) {
	add(t, tb, "k1", "a")
	add(t, tb, "k2", "x")
	add(t, tb, "k1", "b")
	add(t, tb, "k1", "c")
	failures := 2
	pub := &recorder{fail: func(m outbox.Message) (bool, error) {
		if string(m.Body) == "a" && failures > 0 {
			failures--
			return false, errors.New("broker down")
		}
		return true, nil
	}}
	var events []outbox.Event // OnEvent runs on the goroutine calling Round
	relay, err := outbox.NewRelay(tb.Store, pub, outbox.RelayOptions{MinBackoff: 20 * time.Millisecond, MaxBackoff: 40 * time.Millisecond, Logger: quiet,
		OnEvent: func(e outbox.Event) { events = append(events, e) }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	before := time.Now()
	if _, err := relay.Round(ctx); err != nil {
		t.Fatal(err)
	}
	if len(pub.got) != 1 || string(pub.got[0].Body) != "x" {
		t.Fatalf("first round published %v, want only k2's x (k1's a failed, b and c wait)", bodies(pub.got))
	}
	if pub.got[0].Header["X-Trace"][0] != "abc" {
		t.Errorf("headers lost: %v", pub.got[0].Header)
	}
	// OnEvent heard each attempt: a's failure with its error and when it is due again, x's
	// publish.
	if len(events) != 2 {
		t.Fatalf("OnEvent after the first round: %+v, want a failed and x published", events)
	}
	for _, e := range events {
		switch string(e.Message.Body) {
		case "a":
			if e.Outcome != outbox.OutcomeFailed || e.Err == nil || e.Err.Error() != "broker down" ||
				e.RetryAt.Before(before.Add(15*time.Millisecond)) || e.RetryAt.After(time.Now().Add(40*time.Millisecond)) || e.Message.Attempts != 1 {
				t.Errorf("a's event %+v, want failed with its error, due again 15-40ms on, attempt 1", e)
			}
		case "x":
			if e.Outcome != outbox.OutcomePublished || e.Err != nil || !e.RetryAt.IsZero() || e.Duration < 0 {
				t.Errorf("x's event %+v, want published", e)
			}
		default:
			t.Errorf("OnEvent for %q in the first round", e.Message.Body)
		}
	}
	drain(t, tb, relay, pub)
	if got := fmt.Sprint(bodies(pub.got)); got != "[x a b c]" {
		t.Fatalf("published %s, want [x a b c]", got)
	}
	var outcomes []string
	for _, e := range events {
		outcomes = append(outcomes, string(e.Message.Body)+":"+string(e.Outcome))
	}
	if got := fmt.Sprint(outcomes); got != "[a:failed x:published a:failed a:published b:published c:published]" {
		t.Errorf("OnEvent heard %s, want every attempt in order", got)
	}
	if lag, err := relay.Lag(ctx); err != nil || lag != 0 {
		t.Fatalf("lag of an empty outbox: %v, %v", lag, err)
	}
}

// Events of one order key wait while its first one fails, whatever their keys: A1 and A2
// (keys a/1 and a/2, order key "a") are published in the order they were added, A2 only
// once A1 is, while B1 (order key "b") is not held up. Events without an order key are
// ordered by their key, as their own order key: K1 and K2 (key "k") in order, L1 (key "l")
// not held up. Claim hands each event out with its order key filled in.
func orderPerOrderKey(t *testing.T, tb Table) {
	ctx := context.Background()
	for _, m := range []outbox.Message{
		{Key: "a/1", OrderKey: "a", Body: []byte("A1")},
		{Key: "k", Body: []byte("K1")},
		{Key: "a/2", OrderKey: "a", Body: []byte("A2")},
		{Key: "b/1", OrderKey: "b", Body: []byte("B1")},
		{Key: "k", Body: []byte("K2")},
		{Key: "l", Body: []byte("L1")},
	} {
		m.Topic = "t"
		if err := tb.AddTx(ctx, m, true); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	failures := map[string]int{"A1": 2, "K1": 2}
	pub := &recorder{fail: func(m outbox.Message) (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		if failures[string(m.Body)] > 0 {
			failures[string(m.Body)]--
			return false, errors.New("broker down")
		}
		return true, nil
	}}
	relay, err := outbox.NewRelay(tb.Store, pub, outbox.RelayOptions{MinBackoff: 20 * time.Millisecond, MaxBackoff: 40 * time.Millisecond, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := relay.Round(ctx); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(bodies(pub.got)); got != "[B1 L1]" {
		t.Fatalf("first round published %s, want [B1 L1]: A1 and K1 failed, A2 (order key a) and K2 (key k) wait behind them", got)
	}
	drain(t, tb, relay, pub)
	pos := map[string]int{}
	for i, m := range pub.got {
		if _, dup := pos[string(m.Body)]; dup {
			t.Fatalf("%s published twice: %v", m.Body, bodies(pub.got))
		}
		pos[string(m.Body)] = i
		want := map[string]string{"A1": "a", "A2": "a", "B1": "b", "K1": "k", "K2": "k", "L1": "l"}[string(m.Body)]
		if m.OrderKey != want {
			t.Errorf("%s handed out with order key %q, want %q", m.Body, m.OrderKey, want)
		}
	}
	if len(pos) != 6 || pos["A1"] > pos["A2"] || pos["K1"] > pos["K2"] {
		t.Fatalf("published %v: want all six, A1 before A2 and K1 before K2", bodies(pub.got))
	}
}

// Four relays drain one table while publishes fail at random, some after the broker took the
// event (so it is published twice). Every event is published, the table ends empty, and per
// order key the first publishes come in the order the events were added: half the streams
// are events of one key without an order key, half events of distinct keys with one.
func concurrentRelays(t *testing.T, tb Table) {
	const keys, perKey = 15, 20
	for i := 0; i < perKey; i++ {
		for k := 0; k < keys; k++ {
			m := outbox.Message{Key: fmt.Sprintf("key-%d", k), Topic: "t", Body: fmt.Appendf(nil, "%d %d", k, i)}
			if k%2 == 0 {
				m.Key, m.OrderKey = fmt.Sprintf("key-%d/%d", k, i), fmt.Sprintf("key-%d", k)
			}
			if err := tb.AddTx(context.Background(), m, true); err != nil {
				t.Fatal(err)
			}
		}
	}
	pub := &recorder{fail: func(outbox.Message) (bool, error) {
		switch rand.IntN(10) {
		case 0:
			return false, errors.New("refused")
		case 1:
			return true, errors.New("confirm lost") // the broker has it; the relay does not know
		}
		return true, nil
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		relay, err := outbox.NewRelay(tb.Store, pub, outbox.RelayOptions{Batch: 7, Interval: 5 * time.Millisecond, MinBackoff: 5 * time.Millisecond, MaxBackoff: 20 * time.Millisecond, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() { _ = relay.Run(ctx) })
	}
	for count(t, tb) > 0 && ctx.Err() == nil {
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	wg.Wait()
	if n := count(t, tb); n != 0 {
		t.Fatalf("%d events left unpublished", n)
	}
	next := map[string]int{}
	dups := 0
	for _, m := range pub.got {
		var k, i int
		fmt.Sscan(string(m.Body), &k, &i)
		stream := fmt.Sprintf("key-%d", k)
		switch {
		case i == next[stream]:
			next[stream]++
		case i < next[stream]:
			dups++ // a repeat of an event already published: the consumer's key absorbs it
		default:
			t.Fatalf("%s: event %d published before event %d", stream, i, next[stream])
		}
	}
	for k := 0; k < keys; k++ {
		if n := next[fmt.Sprintf("key-%d", k)]; n != perKey {
			t.Errorf("key-%d: %d events published, want %d", k, n, perKey)
		}
	}
	t.Logf("%d publishes for %d events (%d repeats)", len(pub.got), keys*perKey, dups)
}

// Eight relays claiming at one instant: each event is handed to one of them, once.
func concurrentClaims(t *testing.T, tb Table) {
	const events = 40
	for i := range events {
		add(t, tb, fmt.Sprint("key-", i), "x")
	}
	now := time.Now()
	var mu sync.Mutex
	got := map[int64]int{}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			ms, err := tb.Store.Claim(context.Background(), now, events, time.Minute)
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			defer mu.Unlock()
			for _, m := range ms {
				got[m.ID]++
			}
		})
	}
	wg.Wait()
	if len(got) != events {
		t.Errorf("%d events claimed, want %d", len(got), events)
	}
	for id, n := range got {
		if n != 1 {
			t.Errorf("event %d handed to %d relays at once, want 1", id, n)
		}
	}
}

// A relay that claimed events and stopped (crashed mid-round) holds them only for its lease;
// another relay publishes them after it.
func stoppedRelay(t *testing.T, tb Table) {
	add(t, tb, "k", "a")
	add(t, tb, "k", "b")
	now := time.Now()
	claimed, err := tb.Store.Claim(context.Background(), now, 10, 300*time.Millisecond)
	if err != nil || len(claimed) != 1 || string(claimed[0].Body) != "a" {
		t.Fatalf("claim: %v %v, want k's first event only", bodies(claimed), err)
	}
	// Within the lease, nothing is handed out: a is held, b waits behind it.
	if again, err := tb.Store.Claim(context.Background(), now.Add(100*time.Millisecond), 10, time.Second); err != nil || len(again) != 0 {
		t.Fatalf("second claim within the lease got %v %v", bodies(again), err)
	}
	pub := &recorder{}
	relay, err := outbox.NewRelay(tb.Store, pub, outbox.RelayOptions{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for count(t, tb) > 0 && time.Now().Before(deadline) {
		if _, err := relay.Round(context.Background()); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := fmt.Sprint(bodies(pub.got)); got != "[a b]" {
		t.Fatalf("published %s, want [a b]", got)
	}
	if pub.got[0].Attempts != 2 {
		t.Errorf("a's attempts %d, want 2 (the stopped relay's claim and this one)", pub.got[0].Attempts)
	}
	// A late Retry from the stopped relay changes nothing once another claim happened.
	if err := tb.Store.Retry(context.Background(), claimed[0], now, "late"); err != nil {
		t.Fatal(err)
	}
}

// Lag is the age of the oldest unsent event.
func lag(t *testing.T, tb Table) {
	add(t, tb, "k", "a")
	time.Sleep(50 * time.Millisecond)
	lag, err := tb.Store.Lag(context.Background())
	if err != nil || lag < 40*time.Millisecond || lag > time.Minute {
		t.Fatalf("lag %v %v, want about 50ms", lag, err)
	}
}

// A published event is marked sent, not deleted: it stays in the table, is never handed out
// again, and no longer counts in the lag. Sweep deletes sent events once the retention has
// passed, at most a batch per call, and never an unsent one.
func sentKeptThenSwept(t *testing.T, tb Table) {
	ctx := context.Background()
	for i := range 3 {
		add(t, tb, fmt.Sprint("k", i), "a")
	}
	pub := &recorder{}
	relay, err := outbox.NewRelay(tb.Store, pub, outbox.RelayOptions{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := relay.Round(ctx); err != nil || n != 3 {
		t.Fatalf("round: %d %v, want 3 published", n, err)
	}
	add(t, tb, "k-later", "b") // not published: never swept
	if unsent, sent := counts(t, tb); unsent != 1 || sent != 3 {
		t.Fatalf("after publishing: %d unsent and %d sent rows, want 1 and 3 (published rows are kept)", unsent, sent)
	}
	later := time.Now().Add(tb.Retention + time.Hour)
	again, err := tb.Store.Claim(ctx, later, 10, time.Minute)
	if err != nil || len(again) != 1 || string(again[0].Body) != "b" {
		t.Fatalf("a claim after publishing handed out %v %v, want only the unsent b", bodies(again), err)
	}
	if n, err := tb.Store.Sweep(ctx, time.Now(), 10); err != nil || n != 0 {
		t.Fatalf("sweep within the retention deleted %d (%v), want 0", n, err)
	}
	for _, want := range []int{2, 1, 0} {
		if n, err := tb.Store.Sweep(ctx, later, 2); err != nil || n != want {
			t.Fatalf("sweep after the retention deleted %d (%v), want %d (batches of 2)", n, err, want)
		}
	}
	if unsent, sent := counts(t, tb); unsent != 1 || sent != 0 {
		t.Fatalf("after sweeping: %d unsent and %d sent rows, want 1 and 0", unsent, sent)
	}
}

// Published events are never handed out again, however many the table keeps and however
// small a claim: a claim of one after many published events hands out the one unsent event
// behind them (published events taking a claim's places would starve it), and a key whose
// events were all published has its next event handed out at once.
func publishedNeverAgain(t *testing.T, tb Table) {
	ctx := context.Background()
	const published = 25
	for i := range published {
		add(t, tb, fmt.Sprint("k", i%5), fmt.Sprint("old-", i))
	}
	pub := &recorder{}
	relay, err := outbox.NewRelay(tb.Store, pub, outbox.RelayOptions{Batch: 1, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 * published {
		if _, err := relay.Round(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if unsent, sent := counts(t, tb); unsent != 0 || sent != published || len(pub.got) != published {
		t.Fatalf("after publishing one event a round: %d unsent, %d sent rows, %d publishes; want 0, %d, %d", unsent, sent, len(pub.got), published, published)
	}
	add(t, tb, "k0", "new-k0")       // a key whose events were all published
	add(t, tb, "fresh", "new-fresh") // a key never seen
	now := time.Now().Add(time.Second)
	for i, want := range []string{"new-k0", "new-fresh"} {
		got, err := tb.Store.Claim(ctx, now, 1, time.Minute)
		if err != nil || len(got) != 1 || string(got[0].Body) != want {
			t.Fatalf("claim %d of one event after %d published ones handed out %v %v, want [%s]", i+1, published, bodies(got), err, want)
		}
	}
	// Past every lease and retry, a claim of everything hands out the two unsent events only.
	later := now.Add(time.Hour)
	got, err := tb.Store.Claim(ctx, later, 2*published, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(bodies(got)) != "[new-k0 new-fresh]" {
		t.Fatalf("a claim of everything an hour later handed out %v, want [new-k0 new-fresh]: published events are never handed out again", bodies(got))
	}
}

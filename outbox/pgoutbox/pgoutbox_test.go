package pgoutbox_test

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

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/outbox"
	"github.com/idemkit/idem/outbox/pgoutbox"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// table creates a fresh outbox table and returns the pool, its options and its store.
func table(t *testing.T) (*pgxpool.Pool, pgoutbox.Options, *pgoutbox.Store) {
	t.Helper()
	ctx := context.Background()
	db, err := pgxpool.New(ctx, testenv.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	opt := pgoutbox.Options{Table: fmt.Sprintf("outbox_test_%d", rand.Int64())}
	if err := pgoutbox.Migrate(ctx, db, opt); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = db.Exec(context.Background(), "DROP TABLE "+opt.Table) })
	st, err := pgoutbox.New(db, opt)
	if err != nil {
		t.Fatal(err)
	}
	return db, opt, st
}

func add(t *testing.T, db *pgxpool.Pool, opt pgoutbox.Options, key, body string) {
	t.Helper()
	if err := pgoutbox.Add(context.Background(), db, opt, outbox.Message{Key: key, Topic: "t", Body: []byte(body), Header: map[string][]string{"X-Trace": {"abc"}}}); err != nil {
		t.Fatal(err)
	}
}

func count(t *testing.T, db *pgxpool.Pool, opt pgoutbox.Options) int {
	t.Helper()
	var n int
	if err := db.QueryRow(context.Background(), "SELECT count(*) FROM "+opt.Table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestAddCommitsWithTheTransaction: an event added in a transaction that rolls back is never
// published; one in a transaction that commits is.
func TestAddCommitsWithTheTransaction(t *testing.T) {
	t.Parallel()
	db, opt, _ := table(t)
	ctx := context.Background()
	for _, commit := range []bool{false, true} {
		tx, err := db.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := pgoutbox.Add(ctx, tx, opt, outbox.Message{Key: "order-1/paid", Topic: "orders", Body: []byte("{}")}); err != nil {
			t.Fatal(err)
		}
		if commit {
			err = tx.Commit(ctx)
		} else {
			err = tx.Rollback(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := count(t, db, opt); n != 1 {
		t.Fatalf("%d events in the outbox, want 1 (the committed one)", n)
	}
	err := pgoutbox.Add(ctx, db, opt, outbox.Message{Topic: "orders"})
	if !errors.Is(err, idem.ErrInvalidInput) {
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

// TestOrderPerKey: a key's later events wait while its first one fails, and are published in
// the order they were added; other keys' events are not held up.
func TestOrderPerKey(t *testing.T) {
	t.Parallel()
	db, opt, st := table(t)
	add(t, db, opt, "k1", "a")
	add(t, db, opt, "k2", "x")
	add(t, db, opt, "k1", "b")
	add(t, db, opt, "k1", "c")
	failures := 2
	pub := &recorder{fail: func(m outbox.Message) (bool, error) {
		if string(m.Body) == "a" && failures > 0 {
			failures--
			return false, errors.New("broker down")
		}
		return true, nil
	}}
	relay, err := outbox.NewRelay(st, pub, outbox.RelayOptions{MinBackoff: 20 * time.Millisecond, MaxBackoff: 40 * time.Millisecond, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := relay.Round(ctx); err != nil {
		t.Fatal(err)
	}
	if len(pub.got) != 1 || string(pub.got[0].Body) != "x" {
		t.Fatalf("first round published %v, want only k2's x (k1's a failed, b and c wait)", bodies(pub.got))
	}
	if pub.got[0].Header["X-Trace"][0] != "abc" {
		t.Errorf("headers lost: %v", pub.got[0].Header)
	}
	deadline := time.Now().Add(10 * time.Second)
	for count(t, db, opt) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("outbox not drained; published %v", bodies(pub.got))
		}
		if _, err := relay.Round(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := fmt.Sprint(bodies(pub.got)); got != "[x a b c]" {
		t.Fatalf("published %s, want [x a b c]", got)
	}
	if lag, err := relay.Lag(ctx); err != nil || lag != 0 {
		t.Fatalf("lag of an empty outbox: %v, %v", lag, err)
	}
}

func bodies(ms []outbox.Message) []string {
	var out []string
	for _, m := range ms {
		out = append(out, string(m.Body))
	}
	return out
}

// TestConcurrentRelays: four relays drain one table while publishes fail at random, some
// after the broker took the event (so it is published twice). Every event is published, the
// table ends empty, and per key the first publishes come in the order the events were added.
func TestConcurrentRelays(t *testing.T) {
	t.Parallel()
	db, opt, st := table(t)
	const keys, perKey = 15, 20
	for i := 0; i < perKey; i++ {
		for k := 0; k < keys; k++ {
			add(t, db, opt, fmt.Sprintf("key-%d", k), fmt.Sprintf("%d", i))
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
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		relay, err := outbox.NewRelay(st, pub, outbox.RelayOptions{Batch: 7, Interval: 5 * time.Millisecond, MinBackoff: 5 * time.Millisecond, MaxBackoff: 20 * time.Millisecond, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() { _ = relay.Run(ctx) })
	}
	for count(t, db, opt) > 0 && ctx.Err() == nil {
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	wg.Wait()
	if n := count(t, db, opt); n != 0 {
		t.Fatalf("%d events left unpublished", n)
	}
	next := map[string]int{}
	dups := 0
	for _, m := range pub.got {
		var i int
		fmt.Sscan(string(m.Body), &i)
		switch {
		case i == next[m.Key]:
			next[m.Key]++
		case i < next[m.Key]:
			dups++ // a repeat of an event already published: the consumer's key absorbs it
		default:
			t.Fatalf("%s: event %d published before event %d", m.Key, i, next[m.Key])
		}
	}
	for k := 0; k < keys; k++ {
		if n := next[fmt.Sprintf("key-%d", k)]; n != perKey {
			t.Errorf("key-%d: %d events published, want %d", k, n, perKey)
		}
	}
	t.Logf("%d publishes for %d events (%d repeats)", len(pub.got), keys*perKey, dups)
}

// TestStoppedRelayIsTakenOver: a relay that claimed events and stopped (crashed mid-round)
// holds them only for its lease; another relay publishes them after it.
func TestStoppedRelayIsTakenOver(t *testing.T) {
	t.Parallel()
	db, opt, st := table(t)
	add(t, db, opt, "k", "a")
	add(t, db, opt, "k", "b")
	now := time.Now()
	claimed, err := st.Claim(context.Background(), now, 10, 300*time.Millisecond)
	if err != nil || len(claimed) != 1 || string(claimed[0].Body) != "a" {
		t.Fatalf("claim: %v %v, want k's first event only", bodies(claimed), err)
	}
	// Within the lease, nothing is handed out: a is held, b waits behind it.
	if again, err := st.Claim(context.Background(), now.Add(100*time.Millisecond), 10, time.Second); err != nil || len(again) != 0 {
		t.Fatalf("second claim within the lease got %v %v", bodies(again), err)
	}
	pub := &recorder{}
	relay, err := outbox.NewRelay(st, pub, outbox.RelayOptions{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for count(t, db, opt) > 0 && time.Now().Before(deadline) {
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
	if err := st.Retry(context.Background(), claimed[0], now, "late"); err != nil {
		t.Fatal(err)
	}
}

// TestLag: the age of the oldest unsent event.
func TestLag(t *testing.T) {
	t.Parallel()
	db, opt, st := table(t)
	add(t, db, opt, "k", "a")
	time.Sleep(50 * time.Millisecond)
	lag, err := st.Lag(context.Background())
	if err != nil || lag < 40*time.Millisecond || lag > time.Minute {
		t.Fatalf("lag %v %v, want about 50ms", lag, err)
	}
}

// TestRelayOptions: bad options are refused with an error naming the field.
func TestRelayOptions(t *testing.T) {
	t.Parallel()
	_, _, st := table(t)
	for _, o := range []outbox.RelayOptions{{Batch: -1}, {Lease: time.Second, PublishTimeout: 2 * time.Second}, {MinBackoff: time.Second, MaxBackoff: time.Millisecond}} {
		if _, err := outbox.NewRelay(st, &recorder{}, o); !errors.Is(err, idem.ErrInvalidInput) {
			t.Errorf("%+v: %v, want ErrInvalidInput", o, err)
		}
	}
}

package sweeper_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/store/mysqlstore"
	"github.com/idemkit/idem/store/pgstore"
	"github.com/idemkit/idem/store/redisstore"
	"github.com/idemkit/idem/store/sqlitestore"
	"github.com/idemkit/idem/store/sweeper"
)

// testSchema holds the PostgreSQL and MySQL tables of these tests, each dropped at its end.
const testSchema = "idem_sweeper_test"

func randomName(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// realStores are the backends whose Sweep the paced Sweeper is tested on, each on a table or
// key prefix of its own.
var realStores = []struct {
	name string
	open func(t *testing.T) idem.Store
}{
	{"postgres", func(t *testing.T) idem.Store {
		url := testenv.PostgresURL(t)
		table := randomName("t_")
		st, err := pgstore.Open(context.Background(), url, pgstore.Options{Schema: testSchema, Table: table})
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Migrate(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx := context.Background()
			if _, err := st.Pool().Exec(ctx, fmt.Sprintf(`DROP TABLE IF EXISTS %q.%q`, testSchema, table)); err != nil {
				t.Error(err)
			}
			_, _ = st.Pool().Exec(ctx, fmt.Sprintf(`DELETE FROM %q.%q WHERE tbl = $1`, testSchema, pgstore.MigrationsTable), table)
			_ = st.Close()
		})
		return st
	}},
	{"mysql", func(t *testing.T) idem.Store {
		dsn := testenv.MySQLDSN(t)
		table := randomName("t_")
		st, err := mysqlstore.Open(context.Background(), dsn, mysqlstore.Options{Database: testSchema, Table: table})
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Migrate(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx := context.Background()
			if _, err := st.DB().ExecContext(ctx, fmt.Sprintf("DROP TABLE IF EXISTS `%s`.`%s`", testSchema, table)); err != nil {
				t.Error(err)
			}
			_, _ = st.DB().ExecContext(ctx, fmt.Sprintf("DELETE FROM `%s`.`%s` WHERE tbl = ?", testSchema, mysqlstore.MigrationsTable), table)
			_ = st.Close()
		})
		return st
	}},
	{"sqlite", func(t *testing.T) idem.Store {
		st, err := sqlitestore.Open(context.Background(), filepath.Join(t.TempDir(), "idem.db"), sqlitestore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		return st
	}},
	{"redis", func(t *testing.T) idem.Store {
		rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
		prefix := randomName("idemsweepertest:") + ":"
		st, err := redisstore.New(redisstore.Options{Client: rdb, Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx := context.Background()
			iter := rdb.Scan(ctx, 0, prefix+"*", 1000).Iterator()
			for iter.Next(ctx) {
				_ = rdb.Unlink(ctx, iter.Val()).Err()
			}
			_ = st.Close()
			_ = rdb.Close()
		})
		return st
	}},
}

// TestStoresSweptWhileClaiming, on every real store: a paced Sweeper clears a backlog of
// expired records while workers claim new keys and claim expired ones again, and completes
// them. Every record claimed during the sweep survives it with its token (an expired record
// claimed again is not deleted from under its new holder, whose Complete succeeds); every
// expired record nobody claimed again is gone.
func TestStoresSweptWhileClaiming(t *testing.T) {
	t.Parallel()
	for _, sc := range realStores {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			st := sc.open(t)
			sweptWhileClaiming(t, st)
		})
	}
}

func sweptWhileClaiming(t *testing.T, st idem.Store) {
	ctx := context.Background()
	fp := idem.Fingerprint([]byte("x"))
	const backlog, workers = 3000, 8
	// The backlog: claimed 10s ago for 5s, half of it completed.
	past := time.Now().Add(-10 * time.Second)
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < backlog; i += workers {
				key := fmt.Sprintf("old-%d", i)
				res, err := st.Reserve(ctx, idem.ReserveRequest{Key: key, Fingerprint: fp, Now: past, Lease: time.Second, TTL: 5 * time.Second})
				if err != nil || !res.Claimed {
					errs <- fmt.Errorf("backlog Reserve(%s) = %+v, %v", key, res, err)
					return
				}
				if i%2 == 0 {
					if err := st.Complete(ctx, key, res.Record.Token, idem.Response{Status: 201, Body: []byte("old")}, past, past.Add(5*time.Second)); err != nil {
						errs <- fmt.Errorf("backlog Complete(%s): %v", key, err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}

	caughtUp := make(chan struct{})
	var once sync.Once
	var deleted atomic.Int64
	sw, err := sweeper.Start(st, sweeper.Options{
		Interval: 20 * time.Millisecond, Jitter: time.Millisecond, Batch: 100, MaxShare: 0.5, MaxBatches: 3,
		OnEvent: func(ev sweeper.Event) {
			if ev.Kind != sweeper.EventRun {
				return
			}
			n, err := ev.Run.Deleted, ev.Run.Err
			if err != nil {
				t.Errorf("sweep: %v", err)
			}
			deleted.Add(int64(n))
			if err == nil && n == 0 && deleted.Load() > 0 {
				once.Do(func() { close(caughtUp) })
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sw.Stop()

	// Live traffic while the backlog goes: new keys, and old keys claimed again.
	type held struct {
		token     int64
		completed bool
	}
	var mu sync.Mutex
	live := map[string]held{}
	stop := make(chan struct{})
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprintf("new-%d-%d", w, i)
				if i%2 == 1 {
					// An old key of this worker's own: expired, maybe swept already.
					j := w + workers*(i/2)
					if j >= backlog {
						continue
					}
					key = fmt.Sprintf("old-%d", j)
				}
				now := time.Now()
				res, err := st.Reserve(ctx, idem.ReserveRequest{Key: key, Fingerprint: fp, Now: now, Lease: 30 * time.Second, TTL: time.Hour})
				if err != nil || !res.Claimed {
					errs <- fmt.Errorf("live Reserve(%s) = %+v, %v", key, res, err)
					return
				}
				done := i%3 != 0
				if done {
					if err := st.Complete(ctx, key, res.Record.Token, idem.Response{Status: 200, Body: []byte("new")}, now, now.Add(time.Hour)); err != nil {
						errs <- fmt.Errorf("live Complete(%s, token %d): %v", key, res.Record.Token, err)
						return
					}
				}
				mu.Lock()
				live[key] = held{res.Record.Token, done}
				mu.Unlock()
			}
		}()
	}
	select {
	case <-caughtUp:
	case err := <-errs:
		close(stop)
		wg.Wait()
		t.Fatal(err)
	case <-time.After(2 * time.Minute):
		t.Error("the backlog was not cleared within 2 minutes")
	}
	close(stop)
	wg.Wait()
	sw.Stop()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
	if deleted.Load() == 0 {
		t.Fatal("the sweeper deleted nothing")
	}
	mu.Lock()
	defer mu.Unlock()
	lost := 0
	for key, h := range live {
		rec, err := st.Get(ctx, key)
		if err != nil || rec.Token != h.token || (rec.State == idem.StateCompleted) != h.completed {
			if lost++; lost <= 5 {
				t.Errorf("record %s claimed during the sweep (token %d, completed %v): now %+v, %v", key, h.token, h.completed, rec, err)
			}
		}
	}
	gone := 0
	for i := range backlog {
		key := fmt.Sprintf("old-%d", i)
		if _, ok := live[key]; ok {
			continue
		}
		if _, err := st.Get(ctx, key); errors.Is(err, idem.ErrNotFound) {
			gone++
		} else if err != nil {
			t.Fatal(err)
		}
	}
	reclaimed := 0
	for key := range live {
		if key[:4] == "old-" {
			reclaimed++
		}
	}
	t.Logf("%d records claimed during the sweep (%d of them expired ones claimed again), %d lost; %d of %d expired records deleted",
		len(live), reclaimed, lost, gone, backlog-reclaimed)
	if lost > 0 {
		t.Errorf("%d of %d records claimed during the sweep were lost", lost, len(live))
	}
	if gone != backlog-reclaimed {
		t.Errorf("%d of %d expired records left after the backlog was cleared", backlog-reclaimed-gone, backlog-reclaimed)
	}
	if reclaimed < 100 {
		t.Errorf("only %d expired records were claimed again during the sweep: the test did not test that", reclaimed)
	}
}

// TestStoresCountExpired: the SQL stores count their expired records, up to a limit.
func TestStoresCountExpired(t *testing.T) {
	t.Parallel()
	for _, sc := range realStores {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			st := sc.open(t)
			c, ok := st.(sweeper.ExpiredCounter)
			if !ok {
				if sc.name == "redis" {
					t.Skip("redisstore has no expiry index to count by")
				}
				t.Fatalf("%T does not implement sweeper.ExpiredCounter", st)
			}
			ctx := context.Background()
			now := time.Now()
			for i := range 30 {
				exp := now.Add(-time.Minute) // 20 expired, 10 live
				if i >= 20 {
					exp = now.Add(time.Hour)
				}
				if _, err := st.Reserve(ctx, idem.ReserveRequest{Key: fmt.Sprint("k", i), Fingerprint: idem.Fingerprint(nil), Now: exp.Add(-time.Minute), Lease: time.Second, TTL: time.Minute}); err != nil {
					t.Fatal(err)
				}
			}
			for _, tc := range []struct{ limit, want int }{{1000, 20}, {20, 20}, {7, 7}, {0, 0}} {
				if n, err := c.CountExpired(ctx, now, tc.limit); n != tc.want || err != nil {
					t.Errorf("CountExpired(limit %d) = %d, %v; want %d", tc.limit, n, err, tc.want)
				}
			}
			if _, err := c.CountExpired(ctx, now, -1); !errors.Is(err, idem.ErrInvalidInput) {
				t.Errorf("CountExpired(limit -1) = %v, want ErrInvalidInput", err)
			}
		})
	}
}

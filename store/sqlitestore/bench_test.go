package sqlitestore

// Benchmarks, each against its physical limit measured in the same run: the raw driver
// (modernc.org/sqlite through database/sql) running the very statements the store runs, on
// the same kind of file (made by Open, so the same schema and pragmas), with the same
// connections (one writer; Options.Readers readers), and 8 goroutines.
//
//	go test -run '^$' -bench . -benchmem -count 5 ./store/sqlitestore/
//
// Ratios, not absolute times, are what to compare: the machine is shared.

import (
	"context"
	"database/sql"
	"log/slog"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/storekit"
)

// benchGoroutines is how many goroutines every parallel benchmark runs.
const benchGoroutines = 8

// parallel8 makes RunParallel use benchGoroutines goroutines (or GOMAXPROCS, if more).
func parallel8(b *testing.B) {
	p := runtime.GOMAXPROCS(0)
	b.SetParallelism(max(1, (benchGoroutines+p-1)/p))
}

func opsPerSec(b *testing.B) {
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
}

var (
	benchFP   = idem.Fingerprint([]byte(`{"amount":1000,"currency":"eur"}`))
	benchResp = idem.Response{
		Status: 201,
		Header: map[string][]string{"Content-Type": {"application/json"}},
		Body:   []byte(`{"id":"ch_1","amount":1000,"currency":"eur","status":"succeeded"}`),
	}
	quiet = slog.New(slog.DiscardHandler)
)

// benchStore opens a store on a fresh file.
func benchStore(b *testing.B) *Store {
	b.Helper()
	st, err := Open(context.Background(), filepath.Join(b.TempDir(), "idem.db"), Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	return st
}

// raw is the baseline: the driver alone, with the store's statements and connections.
type raw struct {
	w, r                  *sql.DB
	upsert, complete, get *sql.Stmt
	readers               int
	blob                  []byte
}

// newRaw makes a file with Open (so the same schema), closes the store and opens the file
// with the bare driver.
func newRaw(b *testing.B) *raw {
	b.Helper()
	path := filepath.Join(b.TempDir(), "raw.db")
	o, _ := Options{}.withDefaults()
	if err := Migrate(context.Background(), path, o); err != nil {
		b.Fatal(err)
	}
	abs, _ := filepath.Abs(path)
	rw := &raw{readers: o.Readers, blob: storekit.EncodeResponse(benchResp)}
	var err error
	if rw.w, err = sql.Open("sqlite", dsn(abs, o, false)); err != nil {
		b.Fatal(err)
	}
	rw.w.SetMaxOpenConns(1)
	if rw.r, err = sql.Open("sqlite", dsn(abs, o, true)); err != nil {
		b.Fatal(err)
	}
	rw.r.SetMaxOpenConns(o.Readers)
	rw.r.SetMaxIdleConns(o.Readers)
	q := queries(o.Table)
	for _, p := range []struct {
		db  *sql.DB
		dst **sql.Stmt
		sql string
	}{{rw.w, &rw.upsert, q.upsert}, {rw.w, &rw.complete, q.complete}, {rw.r, &rw.get, q.get}} {
		if *p.dst, err = p.db.Prepare(p.sql); err != nil {
			b.Fatal(err)
		}
	}
	b.Cleanup(func() {
		for _, s := range []*sql.Stmt{rw.upsert, rw.complete, rw.get} {
			s.Close()
		}
		rw.r.Close()
		rw.w.Close()
	})
	return rw
}

// claimAndComplete is the raw two-statement new-key path: the claim upsert, then the
// completion update.
func (rw *raw) claimAndComplete(b *testing.B, key string) {
	now := time.Now()
	us := now.UnixMicro()
	var token, attempts, created int64
	if err := rw.upsert.QueryRow(key, benchFP, storekit.NextToken(0, now), us+30e6, us, us+86400e6).Scan(&token, &attempts, &created); err != nil {
		b.Error(err)
		return
	}
	r, err := rw.complete.Exec(key, token, rw.blob, us, us+86400e6)
	if err != nil {
		b.Error(err)
		return
	}
	if n, _ := r.RowsAffected(); n != 1 {
		b.Error("complete changed no row")
	}
}

// lookup is the raw single-lookup replay path: one SELECT of the record on a reader.
func (rw *raw) lookup(b *testing.B, key string) {
	var fp string
	var resp []byte
	var state, token, lease, attempts, created, expires int64
	var completed sql.NullInt64
	if err := rw.get.QueryRow(key).Scan(&fp, &state, &token, &lease, &attempts, &resp, &created, &completed, &expires); err != nil {
		b.Error(err)
	}
}

// newKeys returns a source of keys never used before in this process.
func newKeys() func() string {
	var n atomic.Int64
	prefix := strconv.FormatInt(time.Now().UnixNano(), 36) + "-"
	return func() string { return prefix + strconv.FormatInt(n.Add(1), 10) }
}

// BenchmarkNewKey: a claim and a completion per operation, one new key each time.
func BenchmarkNewKey(b *testing.B) {
	ctx := context.Background()
	b.Run("raw", func(b *testing.B) {
		rw := newRaw(b)
		key := newKeys()
		parallel8(b)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				rw.claimAndComplete(b, key())
			}
		})
		opsPerSec(b)
	})
	b.Run("store", func(b *testing.B) {
		st := benchStore(b)
		key := newKeys()
		parallel8(b)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				k, now := key(), time.Now()
				res, err := st.Reserve(ctx, idem.ReserveRequest{Key: k, Fingerprint: benchFP, Now: now, Lease: 30 * time.Second, TTL: 24 * time.Hour})
				if err != nil || !res.Claimed {
					b.Error(err, res.Claimed)
					return
				}
				if err := st.Complete(ctx, k, res.Record.Token, benchResp, now, now.Add(24*time.Hour)); err != nil {
					b.Error(err)
					return
				}
			}
		})
		opsPerSec(b)
	})
	b.Run("Do", func(b *testing.B) {
		eng := benchEngine(b, benchStore(b), idem.Options{})
		key := newKeys()
		parallel8(b)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if res, err := eng.Do(ctx, key(), benchFP, ok); err != nil || res.Replayed {
					b.Error(err)
					return
				}
			}
		})
		opsPerSec(b)
	})
}

// replayKeys is how many completed keys the replay benchmarks spread their lookups over.
const replayKeys = 1024

func replayKey(i int) string { return "replay-" + strconv.Itoa(i%replayKeys) }

// fill completes replayKeys keys in st.
func fill(b *testing.B, st idem.Store) {
	b.Helper()
	ctx, now := context.Background(), time.Now()
	for i := range replayKeys {
		res, err := st.Reserve(ctx, idem.ReserveRequest{Key: replayKey(i), Fingerprint: benchFP, Now: now, Lease: 30 * time.Second, TTL: 24 * time.Hour})
		if err != nil {
			b.Fatal(err)
		}
		if err := st.Complete(ctx, replayKey(i), res.Record.Token, benchResp, now, now.Add(24*time.Hour)); err != nil {
			b.Fatal(err)
		}
	}
}

// keyCursor gives each goroutine its own walk over the replay keys, without allocating.
type keyCursor struct {
	keys []string
	next atomic.Int64
}

func newKeyCursor() *keyCursor {
	c := &keyCursor{keys: make([]string, replayKeys)}
	for i := range c.keys {
		c.keys[i] = replayKey(i)
	}
	return c
}

func (c *keyCursor) walker() func() string {
	i := int(c.next.Add(97)) // goroutines start apart
	return func() string {
		i++
		return c.keys[i%len(c.keys)]
	}
}

// BenchmarkReplay: the same completed keys again and again.
func BenchmarkReplay(b *testing.B) {
	ctx := context.Background()
	b.Run("raw", func(b *testing.B) {
		rw := newRaw(b)
		for i := range replayKeys {
			rw.claimAndComplete(b, replayKey(i))
		}
		cur := newKeyCursor()
		parallel8(b)
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			key := cur.walker()
			for pb.Next() {
				rw.lookup(b, key())
			}
		})
		opsPerSec(b)
	})
	b.Run("store", func(b *testing.B) {
		st := benchStore(b)
		fill(b, st)
		cur := newKeyCursor()
		parallel8(b)
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			key := cur.walker()
			for pb.Next() {
				res, err := st.Reserve(ctx, idem.ReserveRequest{Key: key(), Fingerprint: benchFP, Now: time.Now(), Lease: 30 * time.Second, TTL: 24 * time.Hour})
				if err != nil || res.Claimed || res.Record.Response == nil {
					b.Error(err, res.Claimed)
					return
				}
			}
		})
		opsPerSec(b)
	})
	for _, cached := range []bool{false, true} {
		name := "Do"
		opt := idem.Options{}
		if cached {
			name, opt.CacheSize = "Do-cached", 2*replayKeys
		}
		b.Run(name, func(b *testing.B) {
			st := benchStore(b)
			fill(b, st)
			eng := benchEngine(b, st, opt)
			cur := newKeyCursor()
			parallel8(b)
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				key := cur.walker()
				for pb.Next() {
					if res, err := eng.Do(ctx, key(), benchFP, ok); err != nil || !res.Replayed {
						b.Error(err)
						return
					}
				}
			})
			opsPerSec(b)
		})
	}
}

func benchEngine(b *testing.B, st idem.Store, opt idem.Options) *idem.Engine {
	opt.Logger = quiet
	e, err := idem.New(st, opt)
	if err != nil {
		b.Fatal(err)
	}
	return e
}

func ok(context.Context) (idem.Response, error) { return benchResp, nil }

// variant is one side of a paired benchmark: op runs one operation.
type variant struct {
	name string
	op   func() error
}

// paired measures variants in alternating rounds of round operations each (8 goroutines per
// round), so that they share the machine's noise, and reports for each its rate and its ratio
// to the first, the baseline: by wall clock (name/base-%) and by the CPU time the process
// spent (name/base-cpu-%), which other programs on a shared machine do not disturb. Each
// variant runs b.N operations.
func paired(b *testing.B, round int, vs ...variant) {
	elapsed := make([]time.Duration, len(vs))
	cpu := make([]time.Duration, len(vs))
	for done, turn := 0, 0; done < b.N; turn++ {
		n := min(round, b.N-done)
		for j := range vs {
			i := (j + turn) % len(vs) // rotate who goes first
			var left atomic.Int64
			left.Store(int64(n))
			var wg sync.WaitGroup
			start, cpuStart := time.Now(), cpuTime()
			for range benchGoroutines {
				wg.Go(func() {
					for left.Add(-1) >= 0 {
						if err := vs[i].op(); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			elapsed[i] += time.Since(start)
			cpu[i] += cpuTime() - cpuStart
		}
		done += n
	}
	for i, v := range vs {
		b.ReportMetric(float64(b.N)/elapsed[i].Seconds(), v.name+"-ops/s")
		if i > 0 {
			b.ReportMetric(100*elapsed[0].Seconds()/elapsed[i].Seconds(), v.name+"/"+vs[0].name+"-%")
			b.ReportMetric(100*cpu[0].Seconds()/cpu[i].Seconds(), v.name+"/"+vs[0].name+"-cpu-%")
		}
	}
}

// cpuTime returns the user and system CPU time the process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkBars measures the bars with paired, interleaved rounds: the store's
// new-key path (reserve + complete) against the raw two statements, its replay path against
// the raw single lookup, and replays through the engine with and without its cache.
func BenchmarkBars(b *testing.B) {
	ctx := context.Background()
	b.Run("new-key", func(b *testing.B) {
		rw := newRaw(b)
		st := benchStore(b)
		eng := benchEngine(b, benchStore(b), idem.Options{})
		key := newKeys()
		paired(b, 100,
			variant{"raw", func() error { rw.claimAndComplete(b, key()); return nil }},
			variant{"store", func() error {
				k, now := key(), time.Now()
				res, err := st.Reserve(ctx, idem.ReserveRequest{Key: k, Fingerprint: benchFP, Now: now, Lease: 30 * time.Second, TTL: 24 * time.Hour})
				if err != nil {
					return err
				}
				return st.Complete(ctx, k, res.Record.Token, benchResp, now, now.Add(24*time.Hour))
			}},
			variant{"Do", func() error { _, err := eng.Do(ctx, key(), benchFP, ok); return err }},
		)
	})
	b.Run("replay", func(b *testing.B) {
		rw := newRaw(b)
		for i := range replayKeys {
			rw.claimAndComplete(b, replayKey(i))
		}
		st := benchStore(b)
		fill(b, st)
		eng := benchEngine(b, st, idem.Options{})
		cached := benchEngine(b, st, idem.Options{CacheSize: 2 * replayKeys})
		keys := newKeyCursor().keys
		var n atomic.Int64
		key := func() string { return keys[int(n.Add(1))%len(keys)] }
		paired(b, 800,
			variant{"raw", func() error { rw.lookup(b, key()); return nil }},
			variant{"store", func() error {
				_, err := st.Reserve(ctx, idem.ReserveRequest{Key: key(), Fingerprint: benchFP, Now: time.Now(), Lease: 30 * time.Second, TTL: 24 * time.Hour})
				return err
			}},
			variant{"Do", func() error { _, err := eng.Do(ctx, key(), benchFP, ok); return err }},
			variant{"Do-cached", func() error { _, err := cached.Do(ctx, key(), benchFP, ok); return err }},
		)
	})
}

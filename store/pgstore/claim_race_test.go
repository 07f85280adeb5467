package pgstore_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/store/pgstore"
)

// batchHook is the context key of a function that tracedPool's connections call with each
// batch, on the caller's goroutine, before it is sent.
type batchHook struct{}

// batchTracer calls the batchHook of a SendBatch's context.
type batchTracer struct{}

func (batchTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}
func (batchTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (batchTracer) TraceBatchStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceBatchStartData) context.Context {
	if h, ok := ctx.Value(batchHook{}).(func(*pgx.Conn, *pgx.Batch)); ok {
		h(conn, data.Batch)
	}
	return ctx
}
func (batchTracer) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (batchTracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

// ownStore returns a migrated store on its own table and its own pool of at most maxConns
// connections, which call a context's batchHook (tracer true), both gone at the end of t.
func ownStore(t *testing.T, maxConns int32, tracer bool) *pgstore.Store {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(testenv.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = maxConns
	if tracer {
		cfg.ConnConfig.Tracer = batchTracer{}
	}
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	table := randomName("t_")
	st, err := pgstore.New(p, pgstore.Options{Schema: testSchema, Table: table})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dropTable(t, p, testSchema, table) })
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// TestClaimOfARowRemovedAndClaimedMeanwhile: transaction mode's first try finds the key's row
// (an expired claim), and before its full claim runs the row is deleted (as the sweeper
// deletes an expired row) and another request claims the key anew. The full claim waits for
// that request's transaction, and once it commits finds neither a claim nor a record in its
// snapshot: it must run again and replay the committed response, with DoTx and with a
// TxRunner whose wait is bounded (lock_timeout set around each claim statement), never run
// the effect, answer a mismatch, or fail.
func TestClaimOfARowRemovedAndClaimedMeanwhile(t *testing.T) {
	t.Parallel()
	runners := map[string]func(st *pgstore.Store, ctx context.Context, key, fp string, ran *int) (idem.Result, error){
		"DoTx": func(st *pgstore.Store, ctx context.Context, key, fp string, ran *int) (idem.Result, error) {
			return st.DoTx(ctx, key, fp, func(context.Context, pgx.Tx) (idem.Response, error) {
				*ran++
				return idem.Response{Status: 201, Body: []byte("A")}, nil
			})
		},
		"TxRunner": func(st *pgstore.Store, ctx context.Context, key, fp string, ran *int) (idem.Result, error) {
			r := pgstore.NewTxRunner(st, pgstore.TxOptions{Wait: 30 * time.Second})
			return r.Do(ctx, key, fp, func(context.Context) (idem.Response, error) {
				*ran++
				return idem.Response{Status: 201, Body: []byte("A")}, nil
			})
		},
	}
	for name, run := range runners {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			st := ownStore(t, 6, true)
			bg := context.Background()
			key, fp := "removed-"+name, idem.Fingerprint([]byte("removed"))
			// The key's row: a claim that expired an hour ago.
			past := time.Now().Add(-2 * time.Hour)
			if _, err := st.Reserve(bg, idem.ReserveRequest{Key: key, Fingerprint: fp, Now: past, Lease: time.Minute, TTL: time.Hour}); err != nil {
				t.Fatal(err)
			}

			var (
				wg      sync.WaitGroup
				other   idem.Result
				otherE  error
				raced   int
				pollErr error
			)
			hook := func(conn *pgx.Conn, b *pgx.Batch) {
				full := false
				for _, q := range b.QueuedQueries {
					full = full || strings.HasPrefix(q.SQL, "WITH done AS")
				}
				if !full || raced > 0 {
					return
				}
				raced++
				// The first try saw the row; now it goes, and another request claims the key.
				if err := st.Delete(bg, key); err != nil {
					t.Error(err)
					return
				}
				inside, release := make(chan struct{}), make(chan struct{})
				wg.Add(2)
				go func() {
					defer wg.Done()
					other, otherE = st.DoTx(bg, key, fp, func(context.Context, pgx.Tx) (idem.Response, error) {
						close(inside)
						<-release
						return idem.Response{Status: 201, Body: []byte("B")}, nil
					})
				}()
				<-inside
				// That request commits once this claim waits for its transaction.
				pid := conn.PgConn().PID()
				go func() {
					defer wg.Done()
					defer close(release)
					for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
						var wait string
						if pollErr = st.Pool().QueryRow(bg, `SELECT coalesce(wait_event_type, '') FROM pg_stat_activity WHERE pid = $1`, pid).Scan(&wait); pollErr != nil || wait == "Lock" {
							return
						}
					}
				}()
			}
			ran := 0
			res, err := run(st, context.WithValue(bg, batchHook{}, hook), key, fp, &ran)
			wg.Wait()
			if raced != 1 || pollErr != nil {
				t.Fatalf("the race was not staged: %d deletions, %v", raced, pollErr)
			}
			if otherE != nil || !other.Kept || other.Replayed {
				t.Fatalf("the request that claimed the key anew: %+v, %v; want it executed", other, otherE)
			}
			if err != nil || !res.Replayed || string(res.Response.Body) != "B" || ran != 0 {
				t.Fatalf("claim that found the row gone and claimed again: %+v (body %q), %v, effect ran %d times; want the replay of B",
					res, res.Response.Body, err, ran)
			}
		})
	}
}

// TestDoTxKeepsItsConnection: an attempt that ends with its transaction open (the effect
// failed) rolls it back before the connection goes back to the pool, so the pool keeps the
// connection instead of closing it and opening another for the next call.
func TestDoTxKeepsItsConnection(t *testing.T) {
	t.Parallel()
	st := ownStore(t, 1, false)
	ctx := context.Background()
	fp := idem.Fingerprint([]byte("keeps"))
	r := pgstore.NewTxRunner(st, pgstore.TxOptions{})
	before := st.Pool().Stat().NewConnsCount()
	for i := range 6 {
		key := "keeps-" + string(rune('a'+i))
		_, err := st.DoTx(ctx, key, fp, func(context.Context, pgx.Tx) (idem.Response, error) {
			return idem.Response{}, context.Canceled // any error: nothing is kept
		})
		if err == nil {
			t.Fatal("DoTx with a failing effect: no error")
		}
		// A status the policy rolls back.
		if _, err := r.Do(ctx, key, fp, func(context.Context) (idem.Response, error) {
			return idem.Response{Status: 503}, nil
		}); err != nil {
			t.Fatal(err)
		}
		if _, err := st.DoTx(ctx, key, fp, func(context.Context, pgx.Tx) (idem.Response, error) {
			return idem.Response{Status: 201}, nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	if n := st.Pool().Stat().NewConnsCount() - before; n > 1 {
		t.Fatalf("%d connections opened for 18 transactions on a pool of 1; want at most 1", n)
	}
}

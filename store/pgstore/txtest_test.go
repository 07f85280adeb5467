package pgstore_test

import (
	"cmp"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/store/pgstore"
	"github.com/idemkit/idem/store/storetest/txtest"
)

// TestTxConformance runs the transaction-mode suite on TxRunner, with an orders table beside
// each store's records table. It has a pool of its own: its duplicates, waiting, hold their
// connections, and the other tests' deadlines must not depend on them.
func TestTxConformance(t *testing.T) {
	t.Parallel()
	cfg, err := pgxpool.ParseConfig(testenv.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 8 // the server is shared: a few, beside the shared pool
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	// The plain layout claims a new key with BEGIN in one round trip; the partitioned layout
	// claims across partitions with statements of its own: each runs the whole suite.
	for _, width := range []time.Duration{0, 10 * time.Minute} {
		t.Run(cmp.Or(map[time.Duration]string{0: "plain"}[width], "partitioned"), func(t *testing.T) {
			t.Parallel()
			runTxConformance(t, p, width)
		})
	}
}

func runTxConformance(t *testing.T, p *pgxpool.Pool, width time.Duration) {
	txtest.Run(t, func(t *testing.T, cfg txtest.Config) txtest.Harness {
		table, orders, attach := strings.Cut(cfg.Attach, " ")
		if !attach {
			table = randomName("t_")
		}
		st, err := pgstore.New(p, pgstore.Options{Schema: testSchema, Table: table, TxTTL: cfg.TTL, Now: cfg.Now, PartitionWidth: width})
		if err != nil {
			t.Fatal(err)
		}
		if !attach {
			if err := st.Migrate(context.Background()); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { dropTable(t, p, testSchema, table) })
			orders = ordersTable(t, st)
		}
		return txtest.Harness{
			Runner: pgstore.NewTxRunner(st, pgstore.TxOptions{Wait: cfg.Wait}),
			Store:  st,
			Insert: func(ctx context.Context) error {
				_, err := pgstore.TxFromContext(ctx).Exec(ctx, `INSERT INTO `+orders+` (customer, amount) VALUES ('c1', 4200)`)
				return err
			},
			Count: func(ctx context.Context) (n int, err error) {
				err = p.QueryRow(ctx, `SELECT count(*) FROM `+orders).Scan(&n)
				return n, err
			},
			Name: table + " " + orders,
			RunTx: func(ctx context.Context, call idem.Call, fn idem.Func) (idem.Result, error) {
				return st.RunTx(ctx, call, func(ctx context.Context, _ pgx.Tx) (idem.Response, error) { return fn(ctx) })
			},
			DoTx: func(ctx context.Context, key, fp string, fn idem.Func) (idem.Result, error) {
				return st.DoTx(ctx, key, fp, func(ctx context.Context, _ pgx.Tx) (idem.Response, error) { return fn(ctx) })
			},
		}
	})
}

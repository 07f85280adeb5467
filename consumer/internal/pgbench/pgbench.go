// Package pgbench gives the broker adapters' benchmarks a PostgreSQL store to set beside the
// ones consumertest.Throughput always runs.
package pgbench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/store/pgstore"
)

// Stores returns {"pgstore": a pgstore on a fresh table of the test PostgreSQL}, for
// consumertest.BenchOptions.Stores. It skips b (or fails it, when services are required) if
// PostgreSQL cannot be reached.
func Stores(b *testing.B) map[string]func(*testing.B) idem.Store {
	url := testenv.PostgresURL(b)
	if url == "" {
		return nil
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		b.Fatal(err)
	}
	cfg.MaxConns = 16 // at least the deliveries in flight, so none waits for a connection
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	return map[string]func(*testing.B) idem.Store{"pgstore": func(b *testing.B) idem.Store {
		p := make([]byte, 5)
		_, _ = rand.Read(p)
		table := "consumerbench_" + hex.EncodeToString(p)
		st, err := pgstore.New(pool, pgstore.Options{Table: table})
		if err != nil {
			b.Fatal(err)
		}
		if err := st.Migrate(context.Background()); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _, _ = pool.Exec(context.Background(), "DROP TABLE IF EXISTS "+table) })
		return st
	}}
}

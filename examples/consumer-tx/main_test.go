package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemkit/idem/internal/testenv"
)

func TestEveryOrderChargedOnce(t *testing.T) {
	pgURL, natsURL := testenv.PostgresURL(t), testenv.NATSURL(t)
	if pgURL == "" || natsURL == "" {
		return
	}
	ctx := context.Background()
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
	var b [5]byte
	_, _ = rand.Read(b[:])
	charges, records := "example_tx_charges_"+hex.EncodeToString(b[:]), "example_tx_idem_"+hex.EncodeToString(b[:])
	t.Cleanup(func() {
		for _, name := range []string{charges, records} {
			_, _ = db.Exec(context.Background(), `DROP TABLE IF EXISTS `+pgx.Identifier{name}.Sanitize())
		}
	})
	const orders, copies = 20, 3
	s, err := run(ctx, db, js, charges, records, orders, copies)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", s)
	if s.Rows != orders || s.OrdersWithOneRow != orders || s.Keys != orders {
		t.Errorf("%d charge rows, %d orders with exactly one, %d idem records; want %d of each", s.Rows, s.OrdersWithOneRow, s.Keys, orders)
	}
	if s.Charged != orders || s.Duplicates != orders*(copies-1) || s.Failed != 1 {
		t.Errorf("%d charged, %d duplicates, %d failed; want %d, %d and 1", s.Charged, s.Duplicates, s.Failed, orders, orders*(copies-1))
	}
}

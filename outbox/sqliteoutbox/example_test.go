package sqliteoutbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"

	_ "modernc.org/sqlite"

	"github.com/idemkit/idem/outbox"
	"github.com/idemkit/idem/outbox/sqliteoutbox"
)

// An event added in the transaction of the business write, then published by a relay with
// its key in the Idempotency-Key header.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "outbox")
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", filepath.Join(dir, "app.db"))
	if err != nil {
		panic(err)
	}
	defer db.Close()
	if err := sqliteoutbox.Migrate(ctx, db, sqliteoutbox.Options{}); err != nil {
		panic(err)
	}
	tx, err := db.BeginTx(ctx, nil) // in a handler: sqlitestore.TxFromContext(ctx)
	if err != nil {
		panic(err)
	}
	if err := sqliteoutbox.Add(ctx, tx, sqliteoutbox.Options{}, outbox.Message{Key: "payment-42/captured", Topic: "payments.captured", Body: []byte(`{"payment":42}`)}); err != nil {
		panic(err)
	}
	if err := tx.Commit(); err != nil {
		panic(err)
	}
	st, err := sqliteoutbox.New(db, sqliteoutbox.Options{})
	if err != nil {
		panic(err)
	}
	relay, err := outbox.NewRelay(st, outbox.PublisherFunc(func(_ context.Context, m outbox.Message) error {
		fmt.Println(m.Topic, m.Key, string(m.Body))
		return nil
	}), outbox.RelayOptions{})
	if err != nil {
		panic(err)
	}
	if _, err := relay.Round(ctx); err != nil { // relay.Run(ctx) in a service
		panic(err)
	}
	// Output: payments.captured payment-42/captured {"payment":42}
}

package mysqloutbox_test

import (
	"context"
	"database/sql"

	"github.com/idemkit/idem/outbox"
	"github.com/idemkit/idem/outbox/mysqloutbox"
)

// The table created once, an event added in the handler's transaction, and the relay.
func Example() {
	var db *sql.DB           // sql.Open("mysql", dsn)
	var pub outbox.Publisher // natsout.New, amqpout.New, …
	if db == nil {
		return // in a service: a real database
	}
	ctx := context.Background()
	if err := mysqloutbox.Migrate(ctx, db, mysqloutbox.Options{}); err != nil {
		panic(err)
	}
	tx, err := db.BeginTx(ctx, nil) // in a handler: mysqlstore.TxFromContext(ctx)
	if err != nil {
		panic(err)
	}
	if err := mysqloutbox.Add(ctx, tx, mysqloutbox.Options{}, outbox.Message{Key: "payment-42/captured", Topic: "payments.captured"}); err != nil {
		panic(err)
	}
	if err := tx.Commit(); err != nil {
		panic(err)
	}
	st, err := mysqloutbox.New(db, mysqloutbox.Options{})
	if err != nil {
		panic(err)
	}
	relay, err := outbox.NewRelay(st, pub, outbox.RelayOptions{})
	if err != nil {
		panic(err)
	}
	go relay.Run(ctx)
}

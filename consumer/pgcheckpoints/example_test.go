package pgcheckpoints_test

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/consumer/kinesis"
	"github.com/idemkit/idem/consumer/pgcheckpoints"
)

// The checkpoints of the "ledger" application in the idem_checkpoints table, created once,
// shared by every worker of the application.
func ExampleNew() {
	var pool *pgxpool.Pool // pgxpool.New(ctx, url)
	if pool == nil {
		return // in a service: a real pool
	}
	cps, err := pgcheckpoints.New(pool, pgcheckpoints.Options{Application: "ledger"})
	if err != nil {
		panic(err)
	}
	if err := cps.Migrate(context.Background()); err != nil {
		panic(err)
	}
	opt := kinesis.Options{Stream: "payments", Checkpoints: cps} // and Client: kinesis.Start(ctx, c, opt)
	_ = opt
}

package pgcheckpoints_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/consumer/internal/shards"
	"github.com/idemkit/idem/consumer/internal/shards/shardstest"
	"github.com/idemkit/idem/consumer/pgcheckpoints"
	"github.com/idemkit/idem/internal/testenv"
)

// The checkpoint conformance suite on PostgreSQL, each case an application of its own in one
// table.
func TestConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test (PostgreSQL); skipped with -short")
	}
	ctx := context.Background()
	db, err := pgxpool.New(ctx, testenv.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	table := fmt.Sprintf("checkpoints_test_%d", rand.Int64())
	t.Cleanup(func() { _, _ = db.Exec(context.Background(), "DROP TABLE IF EXISTS "+table) })
	shardstest.Run(t, func(t *testing.T) shards.Checkpoints {
		cps, err := pgcheckpoints.New(db, pgcheckpoints.Options{Table: table, Application: fmt.Sprint("app-", rand.Int64())})
		if err != nil {
			t.Fatal(err)
		}
		if err := cps.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		return cps
	})
}

// A nil pool or a missing application is an *idem.OptionError naming it.
func TestOptions(t *testing.T) {
	var oe *idem.OptionError
	if _, err := pgcheckpoints.New(nil, pgcheckpoints.Options{Application: "a"}); !errors.As(err, &oe) || oe.Field != "db" {
		t.Errorf("nil db: %v", err)
	}
	if _, err := pgcheckpoints.New(&pgxpool.Pool{}, pgcheckpoints.Options{}); !errors.As(err, &oe) || oe.Field != "Options.Application" || !errors.Is(err, idem.ErrInvalidInput) {
		t.Errorf("no application: %v", err)
	}
}

package cli

import (
	"context"
	"errors"
	"fmt"

	"github.com/idemkit/idem/store/sqlmigrate"
	"github.com/idemkit/idem/store/storeurl"
)

func init() {
	register("migrate", "create or upgrade the store's schema", runMigrate)
}

func runMigrate(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "migrate", "[--store URL]")
	store := storeFlag(e, fs)
	if err := parseNoArgs(fs, args); err != nil {
		return err
	}
	storeurl.SetLogger(newLogger(e.stderr, "text", "error"))
	res, err := storeurl.Migrate(ctx, *store)
	switch {
	case errors.Is(err, storeurl.ErrNoSchema):
		fmt.Fprintln(e.stdout, "nothing to migrate: this store has no schema (its keys need nothing created)")
		return nil
	case err != nil:
		return redactError(err, *store)
	}
	fmt.Fprintln(e.stdout, migrateMessage(res))
	return nil
}

// migrateMessage says what a migration did: created, migrated from N to M, or up to date.
func migrateMessage(r sqlmigrate.Result) string {
	switch {
	case r.From == r.To:
		return fmt.Sprintf("up to date: schema version %d", r.To)
	case r.From == 0:
		return fmt.Sprintf("created: schema version %d", r.To)
	}
	return fmt.Sprintf("migrated from schema version %d to %d", r.From, r.To)
}

// Package pgcheckpoints keeps the checkpoints and leases of stream consumers
// (consumer/kinesis, consumer/dynamostream) in a PostgreSQL table, for an application whose
// idem store is PostgreSQL: a restarted worker reads on from where the last one stopped, and
// the workers of one application, in any number of processes, share the stream's shards.
//
//	cps, err := pgcheckpoints.New(pool, pgcheckpoints.Options{Application: "billing"})
//	…
//	w, err := kinesis.Start(ctx, c, kinesis.Options{Client: client, Stream: "payments", Checkpoints: cps})
//
// One row per application and shard; every change is one conditional statement, so two
// workers never hold one shard's lease at once and a checkpoint never moves back. See
// consumer/dynamocheckpoints for what a restart does with checkpoints kept only in memory.
package pgcheckpoints

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/consumer/internal/shards"
)

// DefaultTable is the table's name when Options.Table is empty.
const DefaultTable = "idem_checkpoints"

// Options configure Checkpoints. Application is required.
type Options struct {
	// Table is the table's name. Default DefaultTable.
	Table string
	// Schema holds the table. Default: the connection's search_path.
	Schema string
	// Application names the consumer application: its workers share one Application, and two
	// applications that each handle every record have one each.
	Application string
}

// Checkpoints keep an application's checkpoints and shard leases in a PostgreSQL table. They
// implement the Checkpoints of consumer/kinesis and consumer/dynamostream. Create them with
// New; they are safe for concurrent use.
type Checkpoints struct {
	db  *pgxpool.Pool
	app string
	t   string
}

var _ shards.Checkpoints = (*Checkpoints)(nil)

// New returns the checkpoints of opt.Application in db. A nil db or a missing Application is
// an *idem.OptionError. It does not create the table: see Migrate.
func New(db *pgxpool.Pool, opt Options) (*Checkpoints, error) {
	switch {
	case db == nil:
		return nil, &idem.OptionError{Package: "pgcheckpoints", Field: "db", Problem: "is nil"}
	case opt.Application == "":
		return nil, &idem.OptionError{Package: "pgcheckpoints", Field: "Options.Application", Problem: "is required"}
	}
	table := opt.Table
	if table == "" {
		table = DefaultTable
	}
	t := pgx.Identifier{table}.Sanitize()
	if opt.Schema != "" {
		t = pgx.Identifier{opt.Schema, table}.Sanitize()
	}
	return &Checkpoints{db: db, app: opt.Application, t: t}, nil
}

// Migrate creates the table if it does not exist.
func (c *Checkpoints) Migrate(ctx context.Context) error {
	_, err := c.db.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+c.t+` (
	app              text        NOT NULL,
	shard            text        NOT NULL,
	checkpoint       text        NOT NULL DEFAULT '',
	checkpoint_order text        NOT NULL DEFAULT '',
	lease_owner      text        NOT NULL DEFAULT '',
	lease_until      timestamptz NOT NULL DEFAULT 'epoch',
	PRIMARY KEY (app, shard)
)`)
	if err != nil {
		return fmt.Errorf("pgcheckpoints: migrate: %w", err)
	}
	return nil
}

// Claim implements the Checkpoints interface: one INSERT … ON CONFLICT DO UPDATE … WHERE.
func (c *Checkpoints) Claim(ctx context.Context, shard, owner string, until time.Time) (string, bool, error) {
	var cp string
	err := c.db.QueryRow(ctx, `INSERT INTO `+c.t+` AS t (app, shard, lease_owner, lease_until) VALUES ($1, $2, $3, $4)
ON CONFLICT (app, shard) DO UPDATE SET lease_owner = excluded.lease_owner, lease_until = excluded.lease_until
WHERE t.lease_owner = '' OR t.lease_owner = excluded.lease_owner OR t.lease_until <= $5
RETURNING t.checkpoint`, c.app, shard, owner, until, time.Now()).Scan(&cp)
	if errors.Is(err, pgx.ErrNoRows) {
		cp, err := c.Checkpoint(ctx, shard)
		return cp, false, err
	}
	if err != nil {
		return "", false, fmt.Errorf("pgcheckpoints: claiming shard %s: %w", shard, err)
	}
	return cp, true, nil
}

// Take implements the Checkpoints interface: one UPDATE on the condition that from holds the
// lease.
func (c *Checkpoints) Take(ctx context.Context, shard, from, owner string, until time.Time) (string, bool, error) {
	var cp string
	err := c.db.QueryRow(ctx, `UPDATE `+c.t+` SET lease_owner = $4, lease_until = $5
WHERE app = $1 AND shard = $2 AND lease_owner = $3 RETURNING checkpoint`, c.app, shard, from, owner, until).Scan(&cp)
	if errors.Is(err, pgx.ErrNoRows) {
		cp, err := c.Checkpoint(ctx, shard)
		return cp, false, err
	}
	if err != nil {
		return "", false, fmt.Errorf("pgcheckpoints: taking shard %s: %w", shard, err)
	}
	return cp, true, nil
}

// Save implements the Checkpoints interface: one UPDATE on the condition that owner holds the
// lease and the checkpoint moves forward; when nothing is updated, a read tells which.
func (c *Checkpoints) Save(ctx context.Context, shard, owner, checkpoint string) (bool, error) {
	tag, err := c.db.Exec(ctx, `UPDATE `+c.t+` SET checkpoint = $4, checkpoint_order = $5
WHERE app = $1 AND shard = $2 AND lease_owner = $3 AND checkpoint_order < $5`, c.app, shard, owner, checkpoint, shards.Order(checkpoint))
	if err != nil {
		return false, fmt.Errorf("pgcheckpoints: saving shard %s's checkpoint: %w", shard, err)
	}
	if tag.RowsAffected() == 1 {
		return true, nil
	}
	var holder string
	err = c.db.QueryRow(ctx, `SELECT lease_owner FROM `+c.t+` WHERE app = $1 AND shard = $2`, c.app, shard).Scan(&holder)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("pgcheckpoints: reading shard %s: %w", shard, err)
	}
	return holder == owner, nil
}

// Checkpoint implements the Checkpoints interface.
func (c *Checkpoints) Checkpoint(ctx context.Context, shard string) (string, error) {
	var cp string
	err := c.db.QueryRow(ctx, `SELECT checkpoint FROM `+c.t+` WHERE app = $1 AND shard = $2`, c.app, shard).Scan(&cp)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("pgcheckpoints: reading shard %s: %w", shard, err)
	}
	return cp, nil
}

// Leases implements the Checkpoints interface.
func (c *Checkpoints) Leases(ctx context.Context) ([]shards.Lease, error) {
	rows, err := c.db.Query(ctx, `SELECT shard, checkpoint, lease_owner, lease_until FROM `+c.t+` WHERE app = $1`, c.app)
	if err != nil {
		return nil, fmt.Errorf("pgcheckpoints: listing leases: %w", err)
	}
	defer rows.Close()
	var out []shards.Lease
	for rows.Next() {
		var l shards.Lease
		if err := rows.Scan(&l.Shard, &l.Checkpoint, &l.Owner, &l.Until); err != nil {
			return nil, fmt.Errorf("pgcheckpoints: listing leases: %w", err)
		}
		out = append(out, l)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("pgcheckpoints: listing leases: %w", err)
	}
	return out, nil
}

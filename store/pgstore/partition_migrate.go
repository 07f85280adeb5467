package pgstore

import (
	"context"
	"embed"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/store/internal/storeerr"
	"github.com/idemkit/idem/store/sqlmigrate"
)

//go:embed migrations_partitioned/*.sql
var partitionedFiles embed.FS

var partitionedMigrations = sqlmigrate.MustLoad(partitionedFiles, "migrations_partitioned")

// PartitionedVersionBase is added to the number of each migration of the partitioned layout
// (migrations_partitioned/NNNN_name.sql) to make the version Migrate records: the partitioned
// layout's versions start at 1001, above every version of the plain layout, so a store of
// the plain layout refuses a converted table (sqlmigrate.ErrNewerSchema) instead of writing
// to it.
const PartitionedVersionBase = 1000

// PartitionedSchemaVersion is the schema version this release writes and reads in the
// partitioned layout.
var PartitionedSchemaVersion = PartitionedVersionBase + partitionedMigrations[len(partitionedMigrations)-1].Version

// widthComment is the comment on the parent table that records the partition width.
func widthComment(width int64) string {
	return "idem partitioned records; partition width µs " + strconv.FormatInt(width, 10)
}

// migrate brings the partitioned layout up to date, on conn, under the migrators' lock: it
// creates the parent table, or converts a table of the plain layout (see convert), then
// checks the recorded width and creates the current and the next period's partitions.
func (p *partitioning) migrate(ctx context.Context, conn *pgxpool.Conn) (res sqlmigrate.Result, err error) {
	t := &pgTarget{s: p.s, conn: conn}
	unlock, err := t.Lock(ctx)
	if err != nil {
		return res, fmt.Errorf("lock: %w", err)
	}
	defer func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), lockReleaseTimeout)
		defer cancel()
		_ = unlock(uctx)
	}()
	v, err := t.Version(ctx)
	if err != nil {
		return res, err
	}
	res = sqlmigrate.Result{From: v, To: v}
	switch {
	case v > PartitionedSchemaVersion:
		return res, fmt.Errorf("%w: version %d, this release knows up to %d", sqlmigrate.ErrNewerSchema, v, PartitionedSchemaVersion)
	case v > PartitionedVersionBase:
	case v > SchemaVersion:
		return res, fmt.Errorf("%w: version %d, this release knows up to %d", sqlmigrate.ErrNewerSchema, v, SchemaVersion)
	case v > 0:
		// The plain layout: bring it up to date, then convert it.
		for _, m := range migrations[v:] {
			if err := t.Apply(ctx, m); err != nil {
				return res, fmt.Errorf("migration %s: %w", m.Name, err)
			}
		}
		if err := p.convert(ctx, conn); err != nil {
			return res, fmt.Errorf("convert to the partitioned layout: %w", err)
		}
		v = PartitionedSchemaVersion
		res.To = v
	default:
		var exists bool
		if err := conn.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, p.s.name).Scan(&exists); err != nil {
			return res, err
		}
		if exists {
			return res, fmt.Errorf("table %s exists but %s records no version of it", p.s.name, p.s.migrations)
		}
	}
	for _, m := range partitionedMigrations[max(v-PartitionedVersionBase, 0):] {
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if err := p.applyPartitioned(ctx, tx, m); err != nil {
				return err
			}
			return p.record(ctx, tx, m)
		})
		if err != nil {
			return res, fmt.Errorf("migration %s: %w", m.Name, err)
		}
		res.To = PartitionedVersionBase + m.Version
	}
	var comment *string
	if err := conn.QueryRow(ctx, `SELECT obj_description($1::regclass, 'pg_class')`, p.s.name).Scan(&comment); err != nil {
		return res, err
	}
	if comment == nil || *comment != widthComment(p.width) {
		got := "none"
		if comment != nil {
			got = strings.TrimPrefix(*comment, "idem partitioned records; partition width µs ") + "µs"
		}
		return res, storeerr.Option("pgstore", "Options.PartitionWidth", "%s differs from the width the table %s was made with (%s)", time.Duration(p.width)*time.Microsecond, p.s.name, got)
	}
	b := p.bucket(time.Now().UnixMicro())
	for _, bb := range []int64{b, b + 1} {
		if err := p.ensure(ctx, bb); err != nil {
			return res, err
		}
	}
	return res, nil
}

func (p *partitioning) applyPartitioned(ctx context.Context, tx pgx.Tx, m sqlmigrate.Migration) error {
	_, err := tx.Exec(ctx, sqlmigrate.Expand(m.SQL, map[string]string{
		"table":         p.s.name,
		"comment":       "'" + widthComment(p.width) + "'",
		"created_index": pgx.Identifier{p.s.opt.Table + "_newest"}.Sanitize(),
	}))
	return err
}

func (p *partitioning) record(ctx context.Context, tx pgx.Tx, m sqlmigrate.Migration) error {
	_, err := tx.Exec(ctx, `INSERT INTO `+p.s.migrations+` (tbl, version, name, applied_at) VALUES ($1, $2, $3, $4)`,
		p.s.opt.Table, PartitionedVersionBase+m.Version, "partitioned/"+m.Name, time.Now().UnixMicro())
	return err
}

// LegacyPartition returns the name of the partition that holds the rows of a records table
// converted from the plain layout: the table's name with "_legacy" appended.
func LegacyPartition(table string) string { return table + "_legacy" }

// convert turns the plain records table into the first partition of a partitioned one:
//
//  1. the plain table gets the born column, 0 for every row (a constant default: no rewrite),
//     and a CHECK (born = 0) constraint, validated while the table stays in use (VALIDATE
//     CONSTRAINT scans it under a lock that lets reads and writes through);
//  2. one short transaction then locks it, renames it to LegacyPartition(table), creates the
//     partitioned parent under the old name and attaches the old table as the partition of
//     born < 1 (the validated constraint spares ATTACH its scan), and records the version.
//
// Its rows keep their primary key and expires_at index and are found by every claim, Get and
// List like any other partition's; the partition is dropped whole once all of them expired.
func (p *partitioning) convert(ctx context.Context, conn *pgxpool.Conn) error {
	legacy := LegacyPartition(p.s.opt.Table)
	check := pgx.Identifier{p.s.opt.Table + "_born_legacy"}.Sanitize()
	for _, stmt := range []string{
		`ALTER TABLE ` + p.s.name + ` ADD COLUMN IF NOT EXISTS born bigint NOT NULL DEFAULT 0`,
		`ALTER TABLE ` + p.s.name + ` DROP CONSTRAINT IF EXISTS ` + check,
		`ALTER TABLE ` + p.s.name + ` ADD CONSTRAINT ` + check + ` CHECK (born = 0) NOT VALID`,
		`ALTER TABLE ` + p.s.name + ` VALIDATE CONSTRAINT ` + check,
	} {
		if _, err := conn.Exec(ctx, stmt); err != nil {
			return err
		}
	}
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `LOCK TABLE `+p.s.name+` IN ACCESS EXCLUSIVE MODE`); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `ALTER TABLE `+p.s.name+` RENAME TO `+pgx.Identifier{legacy}.Sanitize()); err != nil {
			return err
		}
		// The parent gets every step of the partitioned layout before the old table is
		// attached: its columns must be the old table's, brought up to date above.
		for _, m := range partitionedMigrations {
			if err := p.applyPartitioned(ctx, tx, m); err != nil {
				return err
			}
		}
		if _, err := tx.Exec(ctx, `ALTER TABLE `+p.s.name+` ATTACH PARTITION `+p.qualified(legacy)+` FOR VALUES FROM (MINVALUE) TO (1)`); err != nil {
			return err
		}
		for _, m := range partitionedMigrations {
			if err := p.record(ctx, tx, m); err != nil {
				return err
			}
		}
		return nil
	})
}

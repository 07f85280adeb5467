-- Version 2: the route that claimed each record (idem.Record.Route), for operators. Existing
-- rows read back as '' (no route). A constant default: PostgreSQL adds the column without
-- rewriting the table.
ALTER TABLE {{table}} ADD COLUMN IF NOT EXISTS route text NOT NULL DEFAULT '';

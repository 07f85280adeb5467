-- Version 3: how many times each record's effect was started, across releases and takeovers
-- (idem.Record.Starts). Existing rows read back 0, which the store reports as their attempts.
-- A constant default: PostgreSQL adds the column without rewriting the table.
ALTER TABLE {{table}} ADD COLUMN IF NOT EXISTS starts integer NOT NULL DEFAULT 0;

-- Version 3: how many times each record's effect was started, across releases and takeovers
-- (idem.Record.Starts). Existing rows read back 0, which the store reports as their attempts.
-- Safe to run again: Migrate passes over a column that exists.
ALTER TABLE {{table}} ADD COLUMN starts INT NOT NULL DEFAULT 0;

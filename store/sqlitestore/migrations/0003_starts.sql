-- Version 3: how many times each record's effect was started, across releases and takeovers
-- (idem.Record.Starts). Existing rows read back 0, which the store reports as their attempts.
ALTER TABLE "{{table}}" ADD COLUMN starts INTEGER NOT NULL DEFAULT 0;

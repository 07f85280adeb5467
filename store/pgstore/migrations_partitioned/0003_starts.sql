-- Partitioned layout, version 3 (recorded as version 1003): how many times each record's effect
-- was started, across releases and takeovers (idem.Record.Starts), on the parent and so on
-- every partition. Existing rows read back 0, which the store reports as their attempts. A
-- constant default: no partition is rewritten.
ALTER TABLE {{table}} ADD COLUMN IF NOT EXISTS starts integer NOT NULL DEFAULT 0;

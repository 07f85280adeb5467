-- Partitioned layout, version 2 (recorded as version 1002): the route that claimed each record
-- (idem.Record.Route), for operators, on the parent and so on every partition. Existing rows
-- read back as '' (no route). A constant default: no partition is rewritten.
ALTER TABLE {{table}} ADD COLUMN IF NOT EXISTS route text NOT NULL DEFAULT '';

-- Partitioned layout, version 5 (recorded as version 1005): the request a client sent
-- (idem.Record.Request), encoded by storekit.EncodeRequest, on the parent and so on every
-- partition. NULL (existing rows, and every claim without one) is no request; no partition is
-- rewritten.
ALTER TABLE {{table}} ADD COLUMN IF NOT EXISTS request bytea;

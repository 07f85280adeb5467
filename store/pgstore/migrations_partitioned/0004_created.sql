-- Partitioned layout, version 4 (recorded as version 1004): the index of newest-first listings
-- (idem.ListNewestFirst), records by creation time then key, on the parent: PostgreSQL builds
-- it on every partition (an equivalent index a partition already has is used as it is) and on
-- every partition attached later.
CREATE INDEX IF NOT EXISTS {{created_index}} ON {{table}} (created_at, key);

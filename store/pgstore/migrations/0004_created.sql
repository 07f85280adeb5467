-- Version 4: the index of newest-first listings (idem.ListNewestFirst): records by creation
-- time, then key, read backward from the newest or from a cursor.
CREATE INDEX IF NOT EXISTS {{created_index}} ON {{table}} (created_at, key);

-- Version 4: the index of newest-first listings (idem.ListNewestFirst): records by creation
-- time, then key, read backward from the newest or from a cursor.
CREATE INDEX IF NOT EXISTS "{{table}}_created_at" ON "{{table}}" (created_at, key);

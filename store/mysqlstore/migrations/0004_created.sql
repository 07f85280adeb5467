-- Version 4: the index of newest-first listings (idem.ListNewestFirst): records by creation
-- time, then key, read backward from the newest or from a cursor. Safe to run again: Migrate
-- passes over an index that exists.
ALTER TABLE {{table}} ADD INDEX {{created_index}} (created_at, `key`);

-- Version 2: the route that claimed each record (idem.Record.Route), for operators: at most 256
-- bytes of UTF-8, compared byte for byte. Existing rows read back as '' (no route). Safe to
-- run again: Migrate passes over a column that exists.
ALTER TABLE {{table}} ADD COLUMN route VARBINARY(256) NOT NULL DEFAULT '';

-- Version 2: the route that claimed each record (idem.Record.Route), for operators. Existing
-- rows read back as '' (no route).
ALTER TABLE "{{table}}" ADD COLUMN route TEXT NOT NULL DEFAULT '';

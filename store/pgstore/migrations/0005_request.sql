-- Version 5: the request a client sent (idem.Record.Request), encoded by storekit.EncodeRequest,
-- kept when the face that claimed the key retains requests. NULL (existing rows, and every claim
-- without one) is no request: PostgreSQL adds a nullable column without rewriting the table,
-- and a NULL takes no room in a row but its bit in the null bitmap.
ALTER TABLE {{table}} ADD COLUMN IF NOT EXISTS request bytea;

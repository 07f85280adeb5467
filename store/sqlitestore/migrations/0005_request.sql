-- Version 5: the request a client sent (idem.Record.Request), encoded by storekit.EncodeRequest,
-- kept when the face that claimed the key retains requests. NULL (existing rows, and every
-- claim without one) is no request.
ALTER TABLE "{{table}}" ADD COLUMN request BLOB;

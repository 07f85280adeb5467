-- Version 1: the records table. One row per scoped key; times are Unix microseconds.
-- A released claim keeps its row with expires_at = 0 and lease_until = 0, so the next claim's
-- token is larger. completed_at and response are NULL while the record is in progress.
CREATE TABLE "{{table}}" (
    key          TEXT    NOT NULL PRIMARY KEY,
    fingerprint  TEXT    NOT NULL,
    state        INTEGER NOT NULL,
    token        INTEGER NOT NULL,
    lease_until  INTEGER NOT NULL,
    attempts     INTEGER NOT NULL,
    response     BLOB,
    created_at   INTEGER NOT NULL,
    completed_at INTEGER,
    expires_at   INTEGER NOT NULL
);

-- Sweep finds expired records by this index, in bounded batches.
CREATE INDEX "{{table}}_expires_at" ON "{{table}}" (expires_at);

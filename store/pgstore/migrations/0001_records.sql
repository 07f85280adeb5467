-- Version 1: the records table. One row per scoped key; times are Unix microseconds.
-- A released claim keeps its row with expires_at = 0 and lease_until = 0, so the next claim's
-- token is larger. completed_at is 0 and response NULL while the record is in progress.
-- Keys compare byte for byte (COLLATE "C"): they are case-sensitive.
CREATE TABLE IF NOT EXISTS {{table}} (
    key          text COLLATE "C" NOT NULL PRIMARY KEY,
    fingerprint  text     NOT NULL,
    state        smallint NOT NULL,
    token        bigint   NOT NULL,
    lease_until  bigint   NOT NULL,
    attempts     integer  NOT NULL,
    response     bytea,
    created_at   bigint   NOT NULL,
    completed_at bigint   NOT NULL DEFAULT 0,
    expires_at   bigint   NOT NULL
);

-- Sweep finds expired records by this index, in bounded batches.
CREATE INDEX IF NOT EXISTS {{index}} ON {{table}} (expires_at);

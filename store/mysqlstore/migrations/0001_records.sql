-- Version 1: the records table. One row per scoped key; times are Unix microseconds.
-- A released claim keeps its row with expires_at = 0 and lease_until = 0, so the next claim's
-- token is larger. completed_at is 0 and response NULL while the record is in progress.
-- Keys are VARBINARY: compared byte for byte (case-sensitive), whatever the server's collation.
-- MySQL DDL is not transactional: every step must be safe to run again.
CREATE TABLE IF NOT EXISTS {{table}} (
    `key`        VARBINARY(512) NOT NULL,
    fingerprint  CHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    state        TINYINT  NOT NULL,
    token        BIGINT   NOT NULL,
    lease_until  BIGINT   NOT NULL,
    attempts     INT      NOT NULL,
    response     LONGBLOB NULL,
    created_at   BIGINT   NOT NULL,
    completed_at BIGINT   NOT NULL DEFAULT 0,
    expires_at   BIGINT   NOT NULL,
    PRIMARY KEY (`key`),
    -- Sweep finds expired records by this index, in bounded batches.
    KEY {{index}} (expires_at)
) ENGINE = InnoDB;

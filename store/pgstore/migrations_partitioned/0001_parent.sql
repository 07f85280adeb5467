-- Partitioned layout, version 1 (recorded as version 1001 in the migrations table): the parent
-- of the record partitions. The columns of the plain layout, plus born: the time the row was
-- written (Unix microseconds), which picks its partition. The parent has no index of its own:
-- each partition, created by the store ahead of its period, has its primary key on key and an
-- index on expires_at, and the store keeps at most one row per key across all of them (see the
-- package documentation). The comment records the partition width; the store checks it.
CREATE TABLE {{table}} (
    key          text COLLATE "C" NOT NULL,
    fingerprint  text     NOT NULL,
    state        smallint NOT NULL,
    token        bigint   NOT NULL,
    lease_until  bigint   NOT NULL,
    attempts     integer  NOT NULL,
    response     bytea,
    created_at   bigint   NOT NULL,
    completed_at bigint   NOT NULL DEFAULT 0,
    expires_at   bigint   NOT NULL,
    born         bigint   NOT NULL
) PARTITION BY RANGE (born);

COMMENT ON TABLE {{table}} IS {{comment}};

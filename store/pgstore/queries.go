package pgstore

// queries are the store's statements for one table. Column order everywhere: fingerprint,
// state, token, lease_until, attempts, response, created_at, completed_at, expires_at, route,
// starts, request.
type queries struct {
	reserve, claimNew, claimNewBounded, complete, release, extend, get, del, sweep, sweepByKey string
}

const cols = `fingerprint, state, token, lease_until, attempts, response, created_at, completed_at, expires_at, route, starts, request`

func newQueries(t string) queries {
	return queries{
		// reserve claims in one statement. $1 key, $2 fingerprint, $3 now, $4 lease_until,
		// $5 expires_at, $6 the token of a first claim (storekit.NextToken(0, now)), $7 the route
		// ("" for none): a new claim stores it, a takeover keeps the route it finds unless
		// that is "". $8 is the request (storekit.EncodeRequest, NULL for none), kept by the
		// same rule as the route.
		//
		// "up" inserts, or updates a conflicting row that is expired or whose lease ran out
		// with the same fingerprint: a claim (attempts 1) or a takeover (attempts + 1). A
		// takeover, or a claim of a released row (expires_at 0) with the same fingerprint,
		// goes on counting starts and keeps created_at. When
		// the conflicting row is live, ON CONFLICT DO UPDATE leaves it as it is but LOCKS its
		// latest version, so it cannot change until this statement ends.
		//
		// "cur" then returns that row. Under READ COMMITTED the statement's snapshot may hold
		// an older version of it (updated by a transaction that committed after the snapshot
		// was taken): FOR SHARE makes PostgreSQL follow the update chain to the latest
		// version, the one we locked, and return that one. If the blocking row is not in the
		// snapshot at all (inserted, or deleted and reinserted, after it was taken), "cur" is
		// empty, the statement returns no row, and Reserve runs it again with a new snapshot.
		//
		// "done" comes first: a record completed and live in the statement's snapshot is
		// final (nothing but its expiry, or an operator's Delete, ends it), so it is returned
		// as it is, and "up" then inserts nothing, so conflicts with nothing and locks
		// nothing. A replay is thus a plain read: no row lock, no transaction id, nothing
		// written to the WAL and no commit to flush, whatever the table's size.
		reserve: `WITH done AS (
	SELECT false, ` + cols + ` FROM ` + t + ` WHERE key = $1 AND state = 2 AND expires_at > $3
), up AS (
	INSERT INTO ` + t + ` AS r (key, ` + cols + `)
	SELECT $1, $2, 1, $6::bigint, $4::bigint, 1, NULL, $3, 0, $5::bigint, $7::text, 1, $8::bytea WHERE NOT EXISTS (SELECT 1 FROM done)
	ON CONFLICT (key) DO UPDATE SET
		fingerprint  = excluded.fingerprint,
		state        = 1,
		token        = GREATEST(r.token + 1, excluded.token),
		lease_until  = excluded.lease_until,
		attempts     = CASE WHEN r.expires_at <= $3 THEN 1 ELSE r.attempts + 1 END,
		response     = NULL,
		created_at   = CASE WHEN r.expires_at > $3 OR (r.expires_at = 0 AND r.fingerprint = excluded.fingerprint)
			THEN r.created_at ELSE excluded.created_at END,
		starts       = CASE WHEN r.expires_at > $3 OR (r.expires_at = 0 AND r.fingerprint = excluded.fingerprint)
			THEN GREATEST(r.starts, r.attempts) + 1 ELSE 1 END,
		completed_at = 0,
		expires_at   = excluded.expires_at,
		route        = CASE WHEN r.expires_at <= $3 OR r.route = '' THEN excluded.route ELSE r.route END,
		request      = CASE WHEN r.expires_at <= $3 OR r.request IS NULL THEN excluded.request ELSE r.request END
	WHERE r.expires_at <= $3
	   OR (r.state = 1 AND r.lease_until <= $3 AND r.fingerprint = excluded.fingerprint)
	RETURNING true, ` + cols + `
), cur AS (
	SELECT false, ` + cols + ` FROM ` + t + `
	WHERE key = $1 AND NOT EXISTS (SELECT 1 FROM up) AND NOT EXISTS (SELECT 1 FROM done)
	FOR SHARE
)
SELECT * FROM done UNION ALL SELECT * FROM up UNION ALL SELECT * FROM cur`,

		// claimNew is the first try of transaction mode's claim, with reserve's arguments: it
		// inserts the claim of a key that has no row (command tag INSERT 0 1: the claim is
		// exactly its arguments, so nothing is read back), and inserts nothing when the key has
		// one (INSERT 0 0, after waiting, like reserve, for a transaction that holds it to end).
		// Planned once and simpler than reserve, it is most of a new key's claim; reserve, run
		// next in the same transaction, answers for a key that has a row.
		claimNew: `INSERT INTO ` + t + ` AS r (key, ` + cols + `)
	VALUES ($1, $2, 1, $6::bigint, $4::bigint, 1, NULL, $3, 0, $5::bigint, $7::text, 1, $8::bytea)
	ON CONFLICT (key) DO NOTHING`,
		// claimNewBounded is claimNew with its wait for a holder bounded by $9, a lock_timeout,
		// without statements of its own around it: the row's values are computed before the
		// row is inserted, so the route's expression saves lock_timeout (in idem.lock_timeout)
		// and sets it to $9 before the insert can wait; RETURNING, computed once the row is in,
		// gives the saved setting back. When the key has a row nothing is returned and
		// lock_timeout stays $8, for the full claim that follows to give back.
		claimNewBounded: `INSERT INTO ` + t + ` AS r (key, ` + cols + `)
	VALUES ($1, $2, 1, $6::bigint, $4::bigint, 1, NULL, $3, 0, $5::bigint,
		$7::text || left(set_config('lock_timeout', $9::text || left(set_config('idem.lock_timeout', current_setting('lock_timeout'), true), 0), true), 0), 1, $8::bytea)
	ON CONFLICT (key) DO NOTHING
	RETURNING set_config('lock_timeout', current_setting('idem.lock_timeout'), true)`,

		// Fenced on the token, and on the claim being live: a released claim
		// (expires_at = 0) is dead for its holder.
		complete: `UPDATE ` + t + ` SET state = 2, response = $3, completed_at = $4, expires_at = $5
	WHERE key = $1 AND token = $2 AND state = 1 AND expires_at <> 0`,
		release: `UPDATE ` + t + ` SET expires_at = 0, lease_until = 0
	WHERE key = $1 AND token = $2 AND state = 1 AND expires_at <> 0`,
		extend: `UPDATE ` + t + ` SET lease_until = $3, expires_at = GREATEST(expires_at, $3)
	WHERE key = $1 AND token = $2 AND state = 1 AND expires_at <> 0`,
		get: `SELECT ` + cols + ` FROM ` + t + ` WHERE key = $1`,
		del: `DELETE FROM ` + t + ` WHERE key = $1`,
		// The inner SELECT walks the expires_at index from the oldest; FOR UPDATE re-checks
		// each row's latest version (a row reclaimed meanwhile is no longer expired and is
		// left alone) and SKIP LOCKED passes over rows a claim holds right now. The DELETE
		// finds the rows by their physical address (a TID scan), not by a primary-key lookup
		// each: tens of times less work per batch. The rows stay locked until the statement
		// ends, so no other transaction can change or move them in between; and the DELETE
		// states the expiry again, so it deletes only rows expired in the version it deletes,
		// whatever happens (a row whose latest version lives at another address is not
		// deleted).
		sweep: `DELETE FROM ` + t + ` WHERE ctid = ANY(ARRAY(
	SELECT ctid FROM ` + t + ` WHERE expires_at <= $1 ORDER BY expires_at LIMIT $2 FOR UPDATE SKIP LOCKED))
	AND expires_at <= $1`,
		// sweepByKey is sweep for a partitioned table, where an address names a row only
		// within its partition: the rows are found again by key.
		sweepByKey: `DELETE FROM ` + t + ` WHERE key IN (
	SELECT key FROM ` + t + ` WHERE expires_at <= $1 ORDER BY expires_at LIMIT $2 FOR UPDATE SKIP LOCKED)
	AND expires_at <= $1`,
	}
}

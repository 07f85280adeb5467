package sqlitestore

import "strings"

// The statements, for a records table named by the placeholder {{table}} (a validated
// identifier, quoted). Times are Unix microseconds. A released record has expires_at = 0.
const (
	// selectRecord reads one record; the columns are those scanRecord expects.
	selectRecord = `SELECT fingerprint, state, token, lease_until, attempts, response, created_at, completed_at, expires_at, route, starts, request
FROM "{{table}}" WHERE key = ?1`

	// upsertClaim is the claim, in one statement: insert a new record, or overwrite one that is
	// expired (?5 = now) or whose lease ran out with the same fingerprint (a takeover). When
	// the existing record is anything else, the WHERE fails, nothing is written and no row is
	// returned. The token is NextToken(previous, now): ?3 is now in microseconds. ?7 is the
	// route: a new claim stores it, a takeover keeps the route it finds unless that is ''.
	// ?8 is the request (NULL for none), kept by the same rule as the route.
	// A takeover, or a claim of a released record (expires_at 0) with the same fingerprint,
	// goes on counting starts from the record's first claim (attempts stays the takeover
	// count: 1 after a release); anything else starts again.
	upsertClaim = `INSERT INTO "{{table}}" AS r
	(key, fingerprint, state, token, lease_until, attempts, response, created_at, completed_at, expires_at, route, starts, request)
VALUES (?1, ?2, 1, ?3, ?4, 1, NULL, ?5, NULL, ?6, ?7, 1, ?8)
ON CONFLICT (key) DO UPDATE SET
	fingerprint  = excluded.fingerprint,
	state        = 1,
	token        = max(r.token + 1, excluded.token),
	lease_until  = excluded.lease_until,
	attempts     = CASE WHEN r.expires_at <= ?5 THEN 1 ELSE r.attempts + 1 END,
	response     = NULL,
	created_at   = CASE WHEN r.expires_at > ?5 OR (r.expires_at = 0 AND r.fingerprint = excluded.fingerprint) THEN r.created_at ELSE ?5 END,
	starts       = CASE WHEN r.expires_at > ?5 OR (r.expires_at = 0 AND r.fingerprint = excluded.fingerprint) THEN max(r.starts, r.attempts) + 1 ELSE 1 END,
	completed_at = NULL,
	expires_at   = excluded.expires_at,
	route        = CASE WHEN r.expires_at <= ?5 OR r.route = '' THEN excluded.route ELSE r.route END,
	request      = CASE WHEN r.expires_at <= ?5 OR r.request IS NULL THEN excluded.request ELSE r.request END
WHERE r.expires_at <= ?5 OR (r.state = 1 AND r.lease_until <= ?5 AND r.fingerprint = excluded.fingerprint)
RETURNING token, attempts, created_at, route, starts, request`

	// held is the fence shared by Complete, Release and Extend: in progress, this token, not
	// released.
	held = `key = ?1 AND token = ?2 AND state = 1 AND expires_at <> 0`

	completeClaim = `UPDATE "{{table}}" SET state = 2, response = ?3, completed_at = ?4, expires_at = ?5 WHERE ` + held
	releaseClaim  = `UPDATE "{{table}}" SET expires_at = 0, lease_until = 0 WHERE ` + held
	extendClaim   = `UPDATE "{{table}}" SET lease_until = ?3, expires_at = max(expires_at, ?3) WHERE ` + held

	deleteRecord = `DELETE FROM "{{table}}" WHERE key = ?1`

	// sweepExpired deletes at most ?2 records expired at ?1, found by the expires_at index;
	// the DELETE states the expiry itself too.
	sweepExpired = `DELETE FROM "{{table}}" WHERE rowid IN (SELECT rowid FROM "{{table}}" WHERE expires_at <= ?1 LIMIT ?2) AND expires_at <= ?1`
)

// States as stored.
const (
	stateInProgress = 1
	stateCompleted  = 2
)

type queryText struct {
	get, upsert, complete, release, extend, del, sweep string
}

func queries(table string) queryText {
	r := strings.NewReplacer("{{table}}", table)
	return queryText{
		get:      r.Replace(selectRecord),
		upsert:   r.Replace(upsertClaim),
		complete: r.Replace(completeClaim),
		release:  r.Replace(releaseClaim),
		extend:   r.Replace(extendClaim),
		del:      r.Replace(deleteRecord),
		sweep:    r.Replace(sweepExpired),
	}
}

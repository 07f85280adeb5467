package mysqlstore

// queries are the store's statements for one table. No statement assigns a column from
// another column assigned before it, so MySQL's left-to-right assignment and MariaDB's
// SIMULTANEOUS_ASSIGNMENT mode give the same results.
type queries struct {
	get, lockingGet, insert, swap, complete, release, extend, held, del, sweep string
}

const cols = `fingerprint, state, token, lease_until, attempts, response, created_at, completed_at, expires_at, route, starts, request`

func newQueries(t string) queries {
	return queries{
		get: "SELECT " + cols + " FROM " + t + " WHERE `key` = ?",
		// lockingGet is get in a DoTx transaction, after its INSERT failed as a duplicate: a
		// shared lock on the row, so it reads the latest committed version, and the row cannot
		// change until this transaction ends. (LOCK IN SHARE MODE is the spelling both MySQL 8
		// and MariaDB accept.)
		lockingGet: "SELECT " + cols + " FROM " + t + " WHERE `key` = ? LOCK IN SHARE MODE",
		insert:     "INSERT INTO " + t + " (`key`, " + cols + ") VALUES (?, ?, 1, ?, ?, 1, NULL, ?, 0, ?, ?, 1, ?)",
		// swap claims a row read before, only if it is still exactly that version.
		swap: "UPDATE " + t + ` SET fingerprint = ?, state = 1, token = ?, lease_until = ?, attempts = ?,
		response = NULL, created_at = ?, completed_at = 0, expires_at = ?, route = ?, starts = ?, request = ?
	WHERE ` + "`key`" + ` = ? AND token = ? AND state = ? AND lease_until = ? AND expires_at = ? AND fingerprint = ?`,
		// Fenced on the token, and on the claim being live: a released claim
		// (expires_at = 0) is dead for its holder.
		complete: "UPDATE " + t + " SET state = 2, response = ?, completed_at = ?, expires_at = ?" +
			" WHERE `key` = ? AND token = ? AND state = 1 AND expires_at <> 0",
		release: "UPDATE " + t + " SET expires_at = 0, lease_until = 0" +
			" WHERE `key` = ? AND token = ? AND state = 1 AND expires_at <> 0",
		extend: "UPDATE " + t + " SET lease_until = ?, expires_at = GREATEST(expires_at, ?)" +
			" WHERE `key` = ? AND token = ? AND state = 1 AND expires_at <> 0",
		held:  "SELECT 1 FROM " + t + " WHERE `key` = ? AND token = ? AND state = 1 AND expires_at <> 0",
		del:   "DELETE FROM " + t + " WHERE `key` = ?",
		sweep: "DELETE FROM " + t + " WHERE expires_at <= ? ORDER BY expires_at LIMIT ?",
	}
}

package mysqlstore

// UseSessionLockWait makes s bound a TxRunner's lock waits as on MySQL (the session's
// innodb_lock_wait_timeout set around the claim), whatever the server is.
func UseSessionLockWait(s *Store) { s.server.Store(serverMySQL) }

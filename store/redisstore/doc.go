// Package redisstore is an idem.Store on Redis, standalone or Cluster, through go-redis v9.
//
//	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"}) // or redis.NewClusterClient
//	st, err := redisstore.New(redisstore.Options{Client: rdb})
//	eng, err := idem.New(st, idem.Options{})
//
// # One round trip per operation
//
// Reserve, Complete, Release, Extend and Delete are each one Lua script (EVALSHA, falling
// back to EVAL once when Redis does not know the script yet), so the check and the write are
// one atomic step on the server: a claim, a takeover of a stale lease and the token fencing of
// Complete, Release and Extend cannot interleave with another client's. Get is one HGETALL.
// A duplicate of a completed key (a replay) costs one round trip: the Reserve script returns
// the stored record, response included.
//
// # Records
//
// A record is a hash: fingerprint, state, token, lease_until, attempts, created_at,
// completed_at, expires_at and the response as one field holding idem.EncodeResponse bytes.
// Times are Unix microseconds and tokens are idem.NextToken values; both are integers below
// 2^53, which Lua's doubles hold exactly. The script compares expires_at with the caller's
// now: a record past it counts as absent (invariant 5), whatever Redis still holds. Release
// sets expires_at and lease_until to 0 and keeps the token, so the next claim's token is
// larger.
//
// Every write also sets a storage TTL (PEXPIRE) of expires_at − now + Options.TTLMargin, so
// Redis deletes old records by itself. It is relative to the caller's now, not an absolute
// PEXPIREAT, so a Redis clock behind idem's cannot delete a record before its window ends;
// Extend moves it by as much as it moves expires_at. The TTL is for cost only.
//
// A call that go-redis retries because its reply was lost (a broken connection) carries the
// same operation id, stored in the record: the retry answers as the first run did, so a lost
// reply neither turns the caller's own claim into "in flight" nor its completion into
// idem.ErrLeaseLost.
//
// # Keys and Redis Cluster
//
// The record of key is <Prefix>{sss}r:<key>, where {sss} is a hash tag naming one of Shards
// (1024) groups, FNV-1a(key) mod 1024. Each group also has an expiry index,
// <Prefix>{sss}x, a sorted set of its keys scored by expires_at. A record and its index share
// the hash tag, hence the slot, so every script touches one slot and runs unchanged on a
// Cluster; the 1024 groups spread over the cluster's slots, and so over its masters. MOVED and
// ASK redirects during resharding are followed by go-redis (raise ClusterOptions.MaxRedirects
// for long migrations).
//
// # Sweep
//
// Redis deletes expired records by their storage TTL, so Sweep is optional. When called, it
// deletes expired records without scanning live ones: it reads each group's expiry index
// (pipelined, 128 groups per round trip) and runs one script per group that has expired
// entries, re-checking each record's expires_at before deleting it. A call stops after batch
// deletions and the next one continues at the group where it stopped. Index entries of
// records that Redis already deleted are dropped by Sweep, and, without any Sweep, by one
// claim in eight (up to 16 entries more than TTLMargin past their expiry), so the index stays
// bounded either way.
//
// # Durability and failures
//
// idem is as durable as Redis is. A Redis that loses acknowledged writes (no persistence, or
// appendfsync everysec and a crash, or an asynchronous replica promoted after a failover)
// forgets claims and completions, and a retry of a forgotten key executes again. Where that
// matters, run Redis with appendonly yes and appendfsync always, and know that a replica
// promoted by a failover may lack the last writes acknowledged by its master. Every failure of a call is an *Error matching idem.ErrStoreUnavailable, so the
// engine fails closed: no effect runs. A record the store cannot read (written by something
// else) is such an error too (wrapping idem.ErrCorruptRecord when it is decoded in Go), never
// a claim or a replay.
//
// # Testing
//
// The tests run store/storetest against a standalone Redis (IDEM_REDIS_ADDR, default
// 127.0.0.1:6379) and a three-master Cluster (IDEM_REDIS_CLUSTER_ADDRS, default
// 127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003, started by scripts/services.sh), and start
// private redis-server processes for the fault tests: a SIGKILL and restart under load, and a
// key-by-key slot migration under racing claims.
package redisstore

// Package redisstore is an idem.Store on Redis, standalone or Cluster, through go-redis v9.
//
//	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
//	st, err := redisstore.New(redisstore.Options{Client: rdb}) // or redis.NewClusterClient
//	eng, err := idem.New(st, idem.Options{})
//
// ContextTimeoutEnabled makes go-redis end a call at its context's deadline; without it a
// Redis that stops answering holds each call for go-redis's ReadTimeout (see Options.Client).
//
// It needs Redis 7.0 or later (SET with both NX and GET); against an older server every
// Reserve fails with a store error, so nothing runs.
//
// # Round trips
//
// Only Lua scripts write, so that a claim, its fencing token and its listing index entry are
// one atomic step on the server; a plain command never decides a claim. Reserve starts with
// one of two commands, and switches between them by the calls it has seen (Store.Reserve):
//
//   - the claim script, around SET <record> PX <ttl> NX GET: Redis writes the claim if the key
//     has no record, and adds the key to the listing index in the same step, and otherwise
//     returns the record untouched, so a new key, a duplicate in flight and a replay of a
//     completed key each cost one round trip, and one script;
//   - a plain GET, while more than about 5 in 7 of the store's recent Reserves found a record:
//     a replay and a duplicate in flight then cost one GET and no script, as much as a plain
//     GET of the record; a new key costs the GET and then the claim script, two round trips.
//
// Why: a script costs redis-server several times what a GET does (the Lua call: about 7 µs of
// command time against 1 µs on a loaded two-core machine, in INFO commandstats), and a
// replay that ran the claim script cost about 1.3 to 1.5 times a plain GET in all, measured
// with go-redis against the same server; reading first brings a replay back to a GET, and
// costs a key without a record one more round trip, which is why the store reads first only
// while records are found often enough to pay for it. Neither command is trusted for a claim:
// a GET that finds nothing is followed by the claim script, which writes only if the key
// still has no record, and a record found (by either command) that may be claimable (past
// its expires_at, released, or a stale lease of the same fingerprint to take over) is handed
// to the reserve script, which decides atomically on the record it finds then. Those cases
// (a retry after a failure, a key reused after its TTL, a takeover) cost two round trips.
// Two ways to claim without Lua were measured and left: SET … NX GET followed by a separate
// ZADD leaves a claim unlisted if its holder dies between the two, and MULTI … EXEC of both
// costs about half a script on every replay and cannot share the automatic pipeliner's
// connections (docs/bench/redis.md).
//
// Complete, Release and Extend are each one Lua script (EVALSHA, falling back to EVAL once
// when Redis does not know the script yet), so the token check and the write are one atomic
// step on the server and cannot interleave with another client's claim or takeover. Get is one
// GET and Delete one script (the record and its index member).
//
// # Automatic pipelining
//
// With Options.AutoPipeline the commands above go through go-redis's automatic pipeliner: the
// commands of concurrent calls share a connection and are written and read together. A call
// costs the same round trips and gets the same answers, and waits no longer than its context
// allows; under concurrency the client and Redis spend about half the CPU per operation
// (docs/benchmarks.md). It is off by default (go-redis marks the API experimental) and not
// recommended on a Cluster whose slots are being moved (see Options.AutoPipeline).
//
// # Records
//
// A record is one Redis string: state, token, lease_until, attempts, created_at, completed_at,
// expires_at, the id of the call that last wrote it, the fingerprint, the route that claimed
// it (idem.Record.Route, when it has one) and, once completed, the response as
// storekit.EncodeResponse bytes (the layout is described in scripts.go). A record without a route
// is laid out as releases before routes laid it out, and reads back without one; a record with
// a route is not readable by those releases (they answer idem.ErrCorruptRecord, failing
// closed), so every process sharing a store runs this release before any of them stores
// routes. Times are
// Unix microseconds and tokens are storekit.NextToken values; both are integers below 2^53, which
// Lua's doubles hold exactly. expires_at is compared with the caller's now: a record past it
// counts as absent, whatever Redis still holds. Release sets expires_at and
// lease_until to 0 and keeps the token, so the next claim's token is larger.
//
// Every write sets the record with a storage TTL (PX) of expires_at − now + Options.TTLMargin,
// so Redis deletes old records by itself. It is relative to the caller's now, not an absolute
// PXAT, so a Redis clock behind idem's cannot delete a record before its TTL runs out; Extend
// moves it by as much as it moves expires_at. The TTL is for cost only.
//
// A call that go-redis retries because its reply was lost (a broken connection) carries the
// same operation id, stored in the record: the retry answers as the first run did, so a lost
// reply neither turns the caller's own claim into "in flight" nor its completion into
// idem.ErrLeaseLost.
//
// # Keys and Redis Cluster
//
// The record of key is <Prefix>{sss}r:<key>, where {sss} is a hash tag naming one of Shards
// (1024) groups, FNV-1a(key) mod 1024: a key's own braces cannot choose its slot, and the
// groups spread over the cluster's slots, and so over its masters. Every command and script
// touches that one key, so all run unchanged on a Cluster. MOVED and ASK redirects during
// resharding are followed by go-redis (raise ClusterOptions.MaxRedirects for long migrations).
//
// # Listing
//
// The store implements idem.Lister (idem list) through an index of its own, never KEYS or a
// SCAN of the key space: each shard has a sorted set <Prefix>{sss}i of its records' keys (all
// with score 0, so ZRANGE … BYLEX reads them in key order), in the record's hash slot, so the
// scripts that write a record update its index atomically, on Redis Cluster too. A page merges
// the key ranges of all Shards indexes (one pipelined ZRANGE of a few keys per shard, sent to
// every master at once) and reads the head of each candidate record, never its body: two round
// trips for most pages, plus one per shard whose keys a page used up, rarely.
//
// Newest first (idem.ListNewestFirst) reads a second sorted set per shard, <Prefix>{sss}t,
// whose members are each record's creation time (16 zero-padded decimal digits of Unix
// microseconds) followed by its key, so ZRANGE … BYLEX REV reads a shard newest first and a
// time range or a cursor is a range of members; the same scripts keep it, in the same atomic
// step, and a record claimed anew after it expired moves its member. The page merges the
// shards' ranges in descending order as above. A cursor is a (creation time, key) position,
// so records claimed while an operator pages go before the first page and never shift the
// later ones. Records written by a version of the store without it are added by the first
// newest-first List of each Store (a pipelined ZCARD of both indexes of every shard, then
// a script per few hundred keys of any shard whose time index is the smaller).
//
// Records that Redis deletes by their storage TTL leave their key in the indexes. Each new key
// checks three random members of each of its shard's indexes and removes those whose record is
// gone (or, in the time index, created at another time), so
// at a steady rate about a third of an index is such leftovers at most; List skips and removes
// those it meets; Sweep and Delete remove the member with the record. The index key itself
// carries a TTL that covers its records', so the index of a prefix nobody writes any more
// expires with its last record.
//
// The indexes cost memory and server time; the time index about as much again as the key
// index, its members 16 bytes longer (the figures that follow were measured before it). Memory:
// a member takes about the key's length plus
// 10 bytes while its shard's index is stored as a listpack (Redis's default: at most 128
// members of at most 64 bytes, so about 100,000 records over the 1,024 shards), and the key's
// length plus about 100 bytes beyond (MEMORY USAGE: 63 bytes per record for 100,000 records
// with 53-byte keys, against 392 for each record itself, completed with a small response;
// used_memory grew by 504 to 525 bytes per record, against 252 for a bare proxy that SETs the
// response alone; 155 and 242 bytes per record for 200,000 records with 53-byte keys and
// 20,000 with 100-byte keys). Raising zset-max-listpack-entries and zset-max-listpack-value in
// the Redis configuration keeps larger stores compact: for 200,000 records with 53-byte keys,
// 62 bytes per record with 256 and 128 against 155 with the defaults, and used_memory 516
// against 619 bytes per record; the price is slower writes into longer listpacks (an insert
// moves the bytes after it), not measured here.
//
// Server time: the claim script runs where a plain SET … NX GET would have sufficed without an
// index, so a new key costs redis-server the Lua call and the index update besides. A replay
// costs a plain GET while the store reads first (see Round trips), and the Lua call of the
// claim script while it does not. Records written by a version of the store without the index
// are listed once a Complete or a new claim rewrites them.
//
// # Sweep
//
// Redis deletes expired records by their storage TTL, so Sweep is optional (idem serve does
// not sweep Redis). Nothing indexes records by expiry, which would cost a write on every call
// of the hot path: Sweep scans the prefix's keys on every master (SCAN MATCH), reads the head
// of each page's records (pipelined) and deletes the expired ones with a pipelined script that
// re-checks expires_at. Its cost grows with the number of keys in Redis. A call stops after
// batch deletions and the next one resumes each node's scan where it stopped.
//
// # Durability and failures
//
// idem is as durable as Redis is. A Redis that loses acknowledged writes (no persistence, or
// appendfsync everysec and a crash, or an asynchronous replica promoted after a failover)
// forgets claims and completions, and a retry of a forgotten key executes again. Where that
// matters, run Redis with appendonly yes and appendfsync always, and know that a replica
// promoted by a failover may lack the last writes acknowledged by its master. Every failure of
// a call is an *idem.StoreError matching idem.ErrStoreUnavailable, so the engine fails closed:
// no effect runs; a closed Store returns idem.ErrClosed. A record the store cannot read (written by something
// else) is such an error too (wrapping idem.ErrCorruptRecord when it is decoded in Go), never
// a claim or a replay.
//
// # Testing
//
// The tests run store/storetest against a standalone Redis (IDEM_REDIS_ADDR, default
// 127.0.0.1:6379) and a three-master Cluster (IDEM_REDIS_CLUSTER_ADDRS, default
// 127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003, started by scripts/services.sh), and start
// private redis-server processes for the fault tests: a SIGKILL and restart under load, a
// Cluster failover under load, and a key-by-key slot migration under racing claims. The
// conformance suite, the round-trip counts, the restart and the failover also run with
// AutoPipeline.
package redisstore

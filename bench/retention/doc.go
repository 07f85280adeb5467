// Package retention measures what keeping records costs idem's stores at scale.
//
// # Table size
//
// SQL runs the new-key path (Reserve + Complete) and the uncached replay path (Reserve of a
// completed key, straight to the store: no engine cache) on PostgreSQL (pgstore),
// MySQL/MariaDB (mysqlstore) and SQLite (sqlitestore), each against tables of several sizes
// filled with SQL beforehand (generate_series on PostgreSQL, the SEQUENCE engine or a cross
// join on MariaDB/MySQL, a recursive CTE on SQLite). Every size has its own table, in its own
// schema (PostgreSQL), with its own name (MySQL) or in its own file (SQLite), so nothing else
// on the servers is touched; the tables are dropped at the end unless asked to keep them.
// Rounds interleave the sizes, and each size's rate is divided by the smallest size's rate
// of the same round: the ratio is what the table's size costs.
//
// Keys look like a gateway's storage keys (a 16-hex-digit scope, a colon, a UUID-shaped key:
// 61 bytes); the generated ones are spread evenly over the key space, new keys land at random
// between them and replays pick them at random, so every lookup walks the whole index.
//
// # Redis memory
//
// RedisMemory writes records through redisstore and reads what they take: MEMORY USAGE of a
// sample of them, and the change of INFO memory's used_memory over all of them.
package retention

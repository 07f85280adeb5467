package redisstore

// RecordKey exposes the Redis key of key's record to the tests.
func RecordKey(s *Store, key string) string { return s.recordKey(shard(key), key) }

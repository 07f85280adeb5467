package redisstore

// RecordKey exposes the Redis key of key's record to the tests.
func RecordKey(s *Store, key string) string { return s.recordKey(shard(key), key) }

// Shard and Tag expose the key layout to the tests.
func Shard(key string) int { return shard(key) }

// Tag returns a shard's hash tag.
func Tag(sh int) string { return tag(sh) }

// PrefixOf returns the store's Options.Prefix.
func PrefixOf(s *Store) string { return s.opt.Prefix }

// IndexKey exposes the Redis key of key's shard's index to the tests.
func IndexKey(s *Store, key string) string { return s.indexKey(shard(key)) }

// PinReadFirst makes Reserve always start with a GET (on) or with the claim script (off),
// whatever the balance of its recent calls. Call it before the store is used.
func PinReadFirst(s *Store, on bool) {
	s.pinned = -1
	if on {
		s.pinned = 1
	}
}

// ReadsFirst reports whether the next Reserve starts with a GET.
func ReadsFirst(s *Store) bool { return s.readFirst() }

// TimeKey exposes the Redis key of key's shard's time index to the tests.
func TimeKey(s *Store, key string) string { return s.timeKey(shard(key)) }

// TimeKeyOf exposes the Redis key of a shard's time index to the tests.
func TimeKeyOf(s *Store, sh int) string { return s.timeKey(sh) }

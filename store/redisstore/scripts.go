package redisstore

import "github.com/redis/go-redis/v9"

// The Lua scripts. Each runs atomically on the node that owns the slot of its keys; every key
// a script touches is passed in KEYS and shares one hash tag, so they run unchanged on Redis
// Cluster.
//
// Record fields (a hash): fp fingerprint · st state (1 in progress, 2 completed) · tok token ·
// lease lease_until · att attempts · crt created_at · cmp completed_at · exp expires_at ·
// resp idem.EncodeResponse bytes · op the id of the last call that wrote the record. Times are
// Unix microseconds and, like tokens, decimal integers below 2^53, so Lua's doubles hold them
// exactly; numbers computed in Lua are written with string.format('%d') so they are stored as
// the same integers Go formats. A released record has exp = 0 and lease = 0 and keeps its
// token.
//
// The op field makes a call that the client retried after a lost reply (go-redis retries on
// network errors) answer as its first execution did, rather than as a second call.

// reserveScript claims KEYS[1] or returns it.
//
//	KEYS: 1 record, 2 expiry index
//	ARGV: 1 index member (the key), 2 fingerprint, 3 now, 4 lease_until, 5 expires_at,
//	      6 storage TTL in ms, 7 drop up to 16 index members scored below this ("" for
//	      none), 8 op id
//	→ {0, fp, st, tok, lease, att, crt, cmp, exp, resp}  not claimed: the existing record,
//	                                                     untouched (nil for a missing field)
//	→ {1 or 2, token, attempts, created_at}              claimed (2: a takeover)
var reserveScript = redis.NewScript(`
local now = tonumber(ARGV[3])
local r = redis.call('HMGET', KEYS[1], 'fp', 'st', 'tok', 'lease', 'att', 'crt', 'cmp', 'exp', 'resp', 'op')
local prev, att, crt, kind = 0, 1, ARGV[3], 1
if r[2] then
  if tonumber(r[8]) > now then
    if r[2] == '1' and r[10] == ARGV[8] then
      -- This very call already claimed it (a retry after a lost reply).
      local k = 1
      if tonumber(r[5]) > 1 then k = 2 end
      return {k, r[3], r[5], r[6]}
    end
    if r[2] == '1' and tonumber(r[4]) <= now and r[1] == ARGV[2] then
      kind, att, crt = 2, tonumber(r[5]) + 1, r[6]
    else
      return {0, r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9]}
    end
  end
  prev = tonumber(r[3])
  if kind == 1 and (r[7] or r[9]) then redis.call('HDEL', KEYS[1], 'resp', 'cmp') end
end
local tok = string.format('%d', math.max(prev + 1, now))
att = string.format('%d', att)
redis.call('HSET', KEYS[1], 'fp', ARGV[2], 'st', '1', 'tok', tok, 'lease', ARGV[4], 'att', att,
  'crt', crt, 'exp', ARGV[5], 'op', ARGV[8])
redis.call('PEXPIRE', KEYS[1], ARGV[6])
redis.call('ZADD', KEYS[2], ARGV[5], ARGV[1])
if ARGV[7] ~= '' then
  local old = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', '(' .. ARGV[7], 'LIMIT', 0, 16)
  if #old > 0 then redis.call('ZREM', KEYS[2], unpack(old)) end
end
return {kind, tok, att, crt}
`)

// completeScript stores a response under a held claim.
//
//	KEYS: 1 record, 2 expiry index
//	ARGV: 1 member, 2 token, 3 response, 4 completed_at, 5 expires_at, 6 storage TTL in ms,
//	      7 op id
//	→ 1 done, 0 not held (lease lost)
var completeScript = redis.NewScript(`
local r = redis.call('HMGET', KEYS[1], 'st', 'tok', 'exp', 'op')
if r[2] ~= ARGV[2] then return 0 end
if r[1] == '2' and r[4] == ARGV[7] then return 1 end
if r[1] ~= '1' or r[3] == '0' then return 0 end
redis.call('HSET', KEYS[1], 'st', '2', 'resp', ARGV[3], 'cmp', ARGV[4], 'exp', ARGV[5], 'op', ARGV[7])
redis.call('PEXPIRE', KEYS[1], ARGV[6])
redis.call('ZADD', KEYS[2], ARGV[5], ARGV[1])
return 1
`)

// releaseScript gives up a held claim: the record expires at once and keeps its token.
//
//	KEYS: 1 record, 2 expiry index
//	ARGV: 1 member, 2 token, 3 op id
//	→ 1 done, 0 not held
var releaseScript = redis.NewScript(`
local r = redis.call('HMGET', KEYS[1], 'st', 'tok', 'exp', 'op')
if r[2] ~= ARGV[2] then return 0 end
if r[3] == '0' and r[4] == ARGV[3] then return 1 end
if r[1] ~= '1' or r[3] == '0' then return 0 end
redis.call('HSET', KEYS[1], 'exp', '0', 'lease', '0', 'op', ARGV[3])
redis.call('ZADD', KEYS[2], 0, ARGV[1])
return 1
`)

// extendScript moves the lease of a held claim, and expires_at with it when it is later. The
// storage TTL moves by as much as expires_at does. Running it twice is the same as once.
//
//	KEYS: 1 record, 2 expiry index
//	ARGV: 1 member, 2 token, 3 until
//	→ 1 done, 0 not held
var extendScript = redis.NewScript(`
local r = redis.call('HMGET', KEYS[1], 'st', 'tok', 'exp')
if r[1] ~= '1' or r[2] ~= ARGV[2] or r[3] == '0' then return 0 end
local untl, exp = tonumber(ARGV[3]), tonumber(r[3])
if untl > exp then
  redis.call('HSET', KEYS[1], 'lease', ARGV[3], 'exp', ARGV[3])
  local pttl = redis.call('PTTL', KEYS[1])
  if pttl > 0 then
    redis.call('PEXPIRE', KEYS[1], string.format('%d', pttl + math.ceil((untl - exp) / 1000)))
  end
  redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
else
  redis.call('HSET', KEYS[1], 'lease', ARGV[3])
end
return 1
`)

// deleteScript removes a record and its index entry, whatever its state.
//
//	KEYS: 1 record, 2 expiry index
//	ARGV: 1 member
var deleteScript = redis.NewScript(`
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[1])
return 1
`)

// sweepScript deletes the records among KEYS[2..] that expired at ARGV[1], and drops from the
// index the members whose record is already gone (deleted by its storage TTL).
//
//	KEYS: 1 expiry index, 2.. records
//	ARGV: 1 now, 2.. the members of KEYS[2..]
//	→ how many records it deleted
var sweepScript = redis.NewScript(`
local now, n = tonumber(ARGV[1]), 0
for i = 2, #KEYS do
  local e = redis.call('HGET', KEYS[i], 'exp')
  if not e then
    redis.call('ZREM', KEYS[1], ARGV[i])
  elseif tonumber(e) <= now then
    redis.call('DEL', KEYS[i])
    redis.call('ZREM', KEYS[1], ARGV[i])
    n = n + 1
  end
end
return n
`)

package redisstore

import "github.com/redis/go-redis/v9"

// A record is one Redis string, so that a claim of a new key and a replay can be one plain
// SET … NX GET (see Store.Reserve), and so that every write sets the value and its storage TTL
// in one command:
//
//	st|tok|lease|att|crt|cmp|exp|op|fplen|<fingerprint><response>
//
// st is the state (1 in progress, 2 completed) · tok the token · lease lease_until · att
// attempts · crt created_at · cmp completed_at (empty until completed) · exp expires_at · op
// the id of the last call that wrote the record · fplen the length in bytes of the fingerprint
// that follows · then the fingerprint and, in a completed record, the response as
// idem.EncodeResponse bytes up to the end. Times are Unix microseconds and, like tokens,
// decimal integers below 2^53, so Lua's doubles hold them exactly; numbers computed in Lua are
// written with string.format('%d') so they are stored as the same integers Go formats. A
// released record has exp = 0 and lease = 0 and keeps its token.
//
// The op field makes a call that the client retried after a lost reply (go-redis retries on
// network errors) answer as its first execution did, rather than as a second call.
//
// The scripts run atomically on the node that owns the slot of their one key, so they run
// unchanged on Redis Cluster.

// luaParse splits a record. It returns nil when the value is not a record.
const luaParse = `
local function parse(v)
  local st, tok, lease, att, crt, cmp, exp, op, n, p = string.match(v,
    '^([12])|(%d+)|(%d+)|(%d+)|(%d+)|(%d*)|(%d+)|([0-9a-z]*)|(%d+)|()')
  if not st then return nil end
  local e = p + tonumber(n)
  if e > #v + 1 then return nil end
  return st, tok, lease, att, crt, cmp, exp, op, string.sub(v, p, e - 1), e
end
`

// luaUnreadable is the error a script answers for a value that is not a record.
const luaUnreadable = `redis.error_reply('ERR redisstore: unreadable record')`

// reserveScript claims KEYS[1] or returns it. Reserve runs it only when its SET … NX GET met a
// record that may be claimable (expired, released, or a stale lease of the same fingerprint).
//
//	KEYS: 1 record
//	ARGV: 1 fingerprint, 2 now, 3 lease_until, 4 expires_at, 5 storage TTL in ms, 6 op id
//	→ {0, record}                             not claimed: the existing record, untouched
//	→ {1 or 2, token, attempts, created_at}   claimed (2: a takeover)
var reserveScript = redis.NewScript(luaParse + `
local now = tonumber(ARGV[2])
local v = redis.call('GET', KEYS[1])
local prev, att, crt, kind = 0, 1, ARGV[2], 1
if v then
  local st, tok, lease, a, c, cmp, exp, op, fp = parse(v)
  if not st then return ` + luaUnreadable + ` end
  if tonumber(exp) > now then
    if st == '1' and op == ARGV[6] then
      -- This very call already claimed it (a retry after a lost reply).
      local k = 1
      if tonumber(a) > 1 then k = 2 end
      return {k, tok, a, c}
    end
    if st == '1' and tonumber(lease) <= now and fp == ARGV[1] then
      kind, att, crt = 2, tonumber(a) + 1, c
    else
      return {0, v}
    end
  end
  prev = tonumber(tok)
end
local tok = string.format('%d', math.max(prev + 1, now))
att = string.format('%d', att)
redis.call('SET', KEYS[1], '1|' .. tok .. '|' .. ARGV[3] .. '|' .. att .. '|' .. crt .. '||' ..
  ARGV[4] .. '|' .. ARGV[6] .. '|' .. #ARGV[1] .. '|' .. ARGV[1], 'PX', ARGV[5])
return {kind, tok, att, crt}
`)

// completeScript stores a response under a held claim.
//
//	KEYS: 1 record
//	ARGV: 1 token, 2 response, 3 completed_at, 4 expires_at, 5 storage TTL in ms, 6 op id
//	→ 1 done, 0 not held (lease lost)
var completeScript = redis.NewScript(luaParse + `
local v = redis.call('GET', KEYS[1])
if not v then return 0 end
local st, tok, lease, att, crt, cmp, exp, op, fp = parse(v)
if not st then return ` + luaUnreadable + ` end
if tok ~= ARGV[1] then return 0 end
if st == '2' and op == ARGV[6] then return 1 end
if st ~= '1' or exp == '0' then return 0 end
redis.call('SET', KEYS[1], '2|' .. tok .. '|' .. lease .. '|' .. att .. '|' .. crt .. '|' ..
  ARGV[3] .. '|' .. ARGV[4] .. '|' .. ARGV[6] .. '|' .. #fp .. '|' .. fp .. ARGV[2], 'PX', ARGV[5])
return 1
`)

// releaseScript gives up a held claim: the record expires at once and keeps its token (and its
// storage TTL).
//
//	KEYS: 1 record
//	ARGV: 1 token, 2 op id
//	→ 1 done, 0 not held
var releaseScript = redis.NewScript(luaParse + `
local v = redis.call('GET', KEYS[1])
if not v then return 0 end
local st, tok, lease, att, crt, cmp, exp, op, fp = parse(v)
if not st then return ` + luaUnreadable + ` end
if tok ~= ARGV[1] then return 0 end
if exp == '0' and op == ARGV[2] then return 1 end
if st ~= '1' or exp == '0' then return 0 end
redis.call('SET', KEYS[1], '1|' .. tok .. '|0|' .. att .. '|' .. crt .. '||0|' .. ARGV[2] .. '|' ..
  #fp .. '|' .. fp, 'KEEPTTL')
return 1
`)

// extendScript moves the lease of a held claim, and expires_at with it when it is later. The
// storage TTL moves by as much as expires_at does. Running it twice is the same as once.
//
//	KEYS: 1 record
//	ARGV: 1 token, 2 until
//	→ 1 done, 0 not held
var extendScript = redis.NewScript(luaParse + `
local v = redis.call('GET', KEYS[1])
if not v then return 0 end
local st, tok, lease, att, crt, cmp, exp, op, fp = parse(v)
if not st then return ` + luaUnreadable + ` end
if st ~= '1' or tok ~= ARGV[1] or exp == '0' then return 0 end
local untl, e = tonumber(ARGV[2]), tonumber(exp)
local rec = '1|' .. tok .. '|' .. ARGV[2] .. '|' .. att .. '|' .. crt .. '||'
if untl > e then
  rec = rec .. ARGV[2] .. '|' .. op .. '|' .. #fp .. '|' .. fp
  local pttl = redis.call('PTTL', KEYS[1])
  if pttl > 0 then
    redis.call('SET', KEYS[1], rec, 'PX', string.format('%d', pttl + math.ceil((untl - e) / 1000)))
    return 1
  end
else
  rec = rec .. exp .. '|' .. op .. '|' .. #fp .. '|' .. fp
end
redis.call('SET', KEYS[1], rec, 'KEEPTTL')
return 1
`)

// sweepScript deletes the record KEYS[1] if it expired at ARGV[1] (it may have been claimed
// again since Sweep read it).
//
//	KEYS: 1 record
//	ARGV: 1 now
//	→ 1 deleted, 0 kept or already gone
var sweepScript = redis.NewScript(`
local v = redis.call('GETRANGE', KEYS[1], 0, 127)
local exp = string.match(v, '^[12]|%d+|%d+|%d+|%d+|%d*|(%d+)|')
if exp and tonumber(exp) <= tonumber(ARGV[1]) then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
`)

package redisstore

import "github.com/redis/go-redis/v9"

// A record is one Redis string, so that a replay can be one plain GET, a claim of a new key one
// SET … NX GET in the claim script (see Store.Reserve), and every write sets the value and its
// storage TTL in one command:
//
//	st|tok|lease|att|crt|cmp|exp|op|fplen|<fingerprint>[r<routelen>|<route>][q<reqlen>|<request>]<response>
//
// st is the state (1 in progress, 2 completed) · tok the token · lease lease_until · att
// attempts, followed, when the record's start count (idem.Record.Starts) differs from them, by
// the letter s and that count (3s5; a record written before starts were counted has none, and
// its start count is its attempts) · crt created_at · cmp completed_at (empty until completed) · exp expires_at · op
// the id of the last call that wrote the record · fplen the length in bytes of the fingerprint
// that follows · then the fingerprint · then, when the record has a route (idem.Record.Route),
// the letter r, the route's length in bytes, | and the route (a record without one has
// nothing there, as records written before routes existed) · then, when the record keeps the
// request its client sent (idem.Record.Request), the letter q, the length in bytes of its
// storekit.EncodeRequest encoding, | and that encoding (a record without one has nothing
// there, so it is stored exactly as before requests were kept) · and, in a completed record,
// the response as storekit.EncodeResponse bytes up to the end (they begin with a version byte
// that is never the letter r or q). Times are Unix microseconds and, like tokens,
// decimal integers below 2^53, so Lua's doubles hold them exactly; numbers computed in Lua are
// written with string.format('%d') so they are stored as the same integers Go formats. A
// released record has exp = 0 and lease = 0 and keeps its token.
//
// The op field makes a call that the client retried after a lost reply (go-redis retries on
// network errors) answer as its first execution did, rather than as a second call.
//
// Every record is also a member of its shard's index, a sorted set <Prefix>{sss}i whose
// members are the keys of the shard's records, all with score 0, so ZRANGE … BYLEX reads them
// in key order (see list.go). The index shares the record's hash tag, so a script that writes
// a record updates its index in the same atomic step, also on Redis Cluster. Members are
// added when a record is written (luaIndex) and removed when a script deletes one; records
// that Redis deleted by their TTL leave their member behind, which luaTrim and List remove
// later, each only after checking, in the same script, that the record is gone. The index
// key carries a TTL at least as long as every record's it lists, so the index of a prefix
// nobody writes any more goes away by itself.
//
// The scripts run atomically on the node that owns the slot of their keys (one record and its
// shard's index, which share a hash tag), so they run unchanged on Redis Cluster.

// luaParse splits a record: its fields, its fingerprint, where what follows them begins (the
// response of a completed record), its route (empty for none) and the stored segment of its
// request (q<len>|<request>, written back as it is; empty for none). It returns nil when the
// value is not a record. rseg is the stored form of a route, to write after the fingerprint
// and before the request's segment.
const luaParse = `
local function parse(v)
  local st, tok, lease, att, crt, cmp, exp, op, n, p = string.match(v,
    '^([12])|(%d+)|(%d+)|(%d+s?%d*)|(%d+)|(%d*)|(%d+)|([0-9a-z]*)|(%d+)|()')
  if not st then return nil end
  local e = p + tonumber(n)
  if e > #v + 1 then return nil end
  local fp, route = string.sub(v, p, e - 1), ''
  if string.sub(v, e, e) == 'r' then
    local rn, rp = string.match(v, '^r(%d+)|()', e)
    if not rn then return nil end
    local re = rp + tonumber(rn)
    if re > #v + 1 then return nil end
    route, e = string.sub(v, rp, re - 1), re
  end
  local req = ''
  if string.sub(v, e, e) == 'q' then
    local qn, qp = string.match(v, '^q(%d+)|()', e)
    if not qn then return nil end
    local qe = qp + tonumber(qn)
    if qe > #v + 1 then return nil end
    req, e = string.sub(v, e, qe - 1), qe
  end
  return st, tok, lease, att, crt, cmp, exp, op, fp, e, route, req
end
local function starts(att)
  local a, s = string.match(att, '^(%d+)s?(%d*)$')
  if s == '' then s = a end
  return tonumber(a), tonumber(s)
end
local function attseg(a, s)
  if a == s then return string.format('%d', a) end
  return string.format('%ds%d', a, s)
end
local function rseg(r)
  if r == '' then return '' end
  return 'r' .. #r .. '|' .. r
end
`

// luaIndex makes the record KEYS[1] a member of the index KEYS[2] and makes the index live
// at least ttl milliseconds (twice that when it has to be extended, so that it is extended
// about once per TTL and not on every write). base is the length of the record key's part
// before the store key (<Prefix>{sss}r:).
const luaIndex = `
local function index(base, ttl)
  redis.call('ZADD', KEYS[2], 0, string.sub(KEYS[1], base + 1))
  if redis.call('PTTL', KEYS[2]) < ttl then redis.call('PEXPIRE', KEYS[2], 2 * ttl) end
end
`

// luaTrim removes from the index KEYS[2] those of a few random members whose record is gone
// (deleted by its storage TTL): three of them. Run on every new key, it keeps the members
// left behind by deleted records to a fraction of the index: about one in three when records
// come and go at a steady rate (each new key removes 3 × that fraction of them, one on average).
const luaTrim = `
local function trim(base)
  local pre = string.sub(KEYS[1], 1, base)
  for _, m in ipairs(redis.call('ZRANDMEMBER', KEYS[2], 3)) do
    if redis.call('EXISTS', pre .. m) == 0 then redis.call('ZREM', KEYS[2], m) end
  end
end
`

// luaUnreadable is the error a script answers for a value that is not a record.
const luaUnreadable = `redis.error_reply('ERR redisstore: unreadable record')`

// claimScript is the new-key path of Reserve (its first command, or its second after a GET
// that found nothing): SET … NX GET writes the claim when the key has no record and otherwise
// returns the record untouched; a new record joins the index.
//
//	KEYS: 1 record, 2 index
//	ARGV: 1 claim, 2 storage TTL in ms, 3 base (see luaIndex)
//	→ nil                                     claimed
//	→ record                                  not claimed: the existing record, untouched
var claimScript = redis.NewScript(luaIndex + luaTrim + `
local v = redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2], 'NX', 'GET')
if v then return v end
local base = tonumber(ARGV[3])
index(base, tonumber(ARGV[2]))
trim(base)
return false
`)

// reserveScript claims KEYS[1] or returns it. Reserve runs it only when its GET or claim
// script met a record that may be claimable (expired, released, or a stale lease of the same
// fingerprint); it decides on the record it finds itself, whatever Reserve read before.
//
// A new claim stores the route and the request it is given; a takeover keeps the record's
// route unless it has none, and its request the same way.
//
//	KEYS: 1 record, 2 index
//	ARGV: 1 fingerprint, 2 now, 3 lease_until, 4 expires_at, 5 storage TTL in ms, 6 op id,
//	      7 base (see luaIndex), 8 route ('' for none), 9 the request's segment ('' for none)
//	→ {0, record}                                         not claimed: the existing record, untouched
//	→ {1 or 2, token, att, created_at, route, request}    claimed (2: a takeover; att and request as stored)
var reserveScript = redis.NewScript(luaParse + luaIndex + `
local now = tonumber(ARGV[2])
local v = redis.call('GET', KEYS[1])
local prev, att, sts, crt, kind, route, req = 0, 1, 1, ARGV[2], 1, ARGV[8], ARGV[9]
if v then
  local st, tok, lease, a, c, cmp, exp, op, fp, _, r, q = parse(v)
  if not st then return ` + luaUnreadable + ` end
  local na, ns = starts(a)
  if tonumber(exp) > now then
    if st == '1' and op == ARGV[6] then
      -- This very call already claimed it (a retry after a lost reply).
      local k = 1
      if na > 1 then k = 2 end
      return {k, tok, a, c, r, q}
    end
    if st == '1' and tonumber(lease) <= now and fp == ARGV[1] then
      kind, att, sts, crt = 2, na + 1, math.max(ns, na) + 1, c
      if r ~= '' then route = r end
      if q ~= '' then req = q end
    else
      return {0, v}
    end
  elseif exp == '0' and fp == ARGV[1] then
    -- Released by a failed attempt and retried: the record goes on counting starts.
    sts, crt = math.max(ns, na) + 1, c
  end
  prev = tonumber(tok)
end
local tok = string.format('%d', math.max(prev + 1, now))
att = attseg(att, sts)
redis.call('SET', KEYS[1], '1|' .. tok .. '|' .. ARGV[3] .. '|' .. att .. '|' .. crt .. '||' ..
  ARGV[4] .. '|' .. ARGV[6] .. '|' .. #ARGV[1] .. '|' .. ARGV[1] .. rseg(route) .. req, 'PX', ARGV[5])
index(tonumber(ARGV[7]), tonumber(ARGV[5]))
return {kind, tok, att, crt, route, req}
`)

// completeScript stores a response under a held claim. It indexes the record again, which
// costs nothing when it is indexed already and indexes a record claimed by a version of the
// store that had no index.
//
//	KEYS: 1 record, 2 index
//	ARGV: 1 token, 2 response, 3 completed_at, 4 expires_at, 5 storage TTL in ms, 6 op id,
//	      7 base (see luaIndex)
//	→ 1 done, 0 not held (lease lost)
var completeScript = redis.NewScript(luaParse + luaIndex + `
local v = redis.call('GET', KEYS[1])
if not v then return 0 end
local st, tok, lease, att, crt, cmp, exp, op, fp, _, route, req = parse(v)
if not st then return ` + luaUnreadable + ` end
if tok ~= ARGV[1] then return 0 end
if st == '2' and op == ARGV[6] then return 1 end
if st ~= '1' or exp == '0' then return 0 end
redis.call('SET', KEYS[1], '2|' .. tok .. '|' .. lease .. '|' .. att .. '|' .. crt .. '|' ..
  ARGV[3] .. '|' .. ARGV[4] .. '|' .. ARGV[6] .. '|' .. #fp .. '|' .. fp .. rseg(route) .. req .. ARGV[2], 'PX', ARGV[5])
index(tonumber(ARGV[7]), tonumber(ARGV[5]))
return 1
`)

// releaseScript gives up a held claim: the record expires at once and keeps its token (and its
// storage TTL).
//
//	KEYS: 1 record, 2 index (unused)
//	ARGV: 1 token, 2 op id
//	→ 1 done, 0 not held
var releaseScript = redis.NewScript(luaParse + `
local v = redis.call('GET', KEYS[1])
if not v then return 0 end
local st, tok, lease, att, crt, cmp, exp, op, fp, _, route, req = parse(v)
if not st then return ` + luaUnreadable + ` end
if tok ~= ARGV[1] then return 0 end
if exp == '0' and op == ARGV[2] then return 1 end
if st ~= '1' or exp == '0' then return 0 end
redis.call('SET', KEYS[1], '1|' .. tok .. '|0|' .. att .. '|' .. crt .. '||0|' .. ARGV[2] .. '|' ..
  #fp .. '|' .. fp .. rseg(route) .. req, 'KEEPTTL')
return 1
`)

// extendScript moves the lease of a held claim, and expires_at with it when it is later. The
// storage TTL moves by as much as expires_at does, and the index's TTL covers it. Running it
// twice is the same as once.
//
//	KEYS: 1 record, 2 index
//	ARGV: 1 token, 2 until
//	→ 1 done, 0 not held
var extendScript = redis.NewScript(luaParse + `
local v = redis.call('GET', KEYS[1])
if not v then return 0 end
local st, tok, lease, att, crt, cmp, exp, op, fp, _, route, req = parse(v)
if not st then return ` + luaUnreadable + ` end
if st ~= '1' or tok ~= ARGV[1] or exp == '0' then return 0 end
local untl, e = tonumber(ARGV[2]), tonumber(exp)
local rec = '1|' .. tok .. '|' .. ARGV[2] .. '|' .. att .. '|' .. crt .. '||'
if untl > e then
  rec = rec .. ARGV[2] .. '|' .. op .. '|' .. #fp .. '|' .. fp .. rseg(route) .. req
  local pttl = redis.call('PTTL', KEYS[1])
  if pttl > 0 then
    local ttl = pttl + math.ceil((untl - e) / 1000)
    redis.call('SET', KEYS[1], rec, 'PX', string.format('%d', ttl))
    if redis.call('PTTL', KEYS[2]) < ttl then redis.call('PEXPIRE', KEYS[2], string.format('%d', 2 * ttl)) end
    return 1
  end
else
  rec = rec .. exp .. '|' .. op .. '|' .. #fp .. '|' .. fp .. rseg(route) .. req
end
redis.call('SET', KEYS[1], rec, 'KEEPTTL')
return 1
`)

// sweepScript deletes the record KEYS[1] if it expired at ARGV[1] (it may have been claimed
// again since Sweep read it), and its index member.
//
//	KEYS: 1 record, 2 index
//	ARGV: 1 now, 2 base (see luaIndex)
//	→ 1 deleted, 0 kept or already gone
var sweepScript = redis.NewScript(`
local v = redis.call('GETRANGE', KEYS[1], 0, 127)
local exp = string.match(v, '^[12]|%d+|%d+|%d+s?%d*|%d+|%d*|(%d+)|')
if exp and tonumber(exp) <= tonumber(ARGV[1]) then
  redis.call('DEL', KEYS[1])
  redis.call('ZREM', KEYS[2], string.sub(KEYS[1], tonumber(ARGV[2]) + 1))
  return 1
end
return 0
`)

// deleteScript deletes the record KEYS[1] and its index member.
//
//	KEYS: 1 record, 2 index
//	ARGV: 1 base (see luaIndex)
//	→ 1
var deleteScript = redis.NewScript(`
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], string.sub(KEYS[1], tonumber(ARGV[1]) + 1))
return 1
`)

// unindexScript removes the member of the record KEYS[1] from the index KEYS[2] if the record
// is gone: List found it missing, and it may have been claimed again since.
//
//	KEYS: 1 record, 2 index
//	ARGV: 1 base (see luaIndex)
//	→ 1 removed, 0 the record exists (or the member was gone)
var unindexScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
return redis.call('ZREM', KEYS[2], string.sub(KEYS[1], tonumber(ARGV[1]) + 1))
`)

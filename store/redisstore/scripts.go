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
// Every record is also a member of its shard's time index, a sorted set <Prefix>{sss}t whose
// members are the record's creation time (created_at, 16 decimal digits, zero-padded) followed
// by its key, all with score 0, so ZRANGE … BYLEX REV reads them newest first, and records
// created in the same microsecond in descending key order (see list.go). A record's member
// changes only when the record is claimed anew (a new created_at): the script that does it
// removes the old member. Scripts that delete a record remove its member; members left behind
// by records Redis deleted by their TTL, or by a record claimed anew after its TTL, are removed
// by luaTrim and List after checking, in the same script, that the record is gone or was
// created at another time. The time index shares the record's hash tag and carries the same
// TTL as the key index. Records written by a version of the store without it are added by List
// (backfill in list.go) the first time it lists newest first.
//
// The scripts run atomically on the node that owns the slot of their keys (one record and its
// shard's indexes, which share a hash tag), so they run unchanged on Redis Cluster.

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

// luaIndex makes the record KEYS[1] a member of the index KEYS[2], and of the time index
// KEYS[3] as created at crt (a number of Unix microseconds), and makes both live at least ttl
// milliseconds (twice that when they have to be extended, so that each is extended about once
// per TTL and not on every write). base is the length of the record key's part before the
// store key (<Prefix>{sss}r:). tmember is a time index member.
const luaIndex = `
local function tmember(crt, key)
  return string.format('%016d', tonumber(crt)) .. key
end
local function index(base, ttl, crt)
  local key = string.sub(KEYS[1], base + 1)
  redis.call('ZADD', KEYS[2], 0, key)
  redis.call('ZADD', KEYS[3], 0, tmember(crt, key))
  for i = 2, 3 do
    if redis.call('PTTL', KEYS[i]) < ttl then redis.call('PEXPIRE', KEYS[i], 2 * ttl) end
  end
end
`

// luaTrim removes from the index KEYS[2] those of a few random members whose record is gone
// (deleted by its storage TTL): three of them; and from the time index KEYS[3] those of three
// random members whose record is gone or was created at another time. Run on every new key,
// it keeps the members left behind by deleted records to a fraction of each index: about one
// in three when records come and go at a steady rate (each new key removes 3 × that fraction
// of them, one on average).
const luaTrim = `
local function trim(base)
  local pre = string.sub(KEYS[1], 1, base)
  for _, m in ipairs(redis.call('ZRANDMEMBER', KEYS[2], 3)) do
    if redis.call('EXISTS', pre .. m) == 0 then redis.call('ZREM', KEYS[2], m) end
  end
  for _, m in ipairs(redis.call('ZRANDMEMBER', KEYS[3], 3)) do
    local crt = string.match(redis.call('GETRANGE', pre .. string.sub(m, 17), 0, 127) or '', '^[12]|%d+|%d+|%d+s?%d*|(%d+)|')
    if not crt or string.format('%016d', tonumber(crt)) ~= string.sub(m, 1, 16) then redis.call('ZREM', KEYS[3], m) end
  end
end
`

// luaUnreadable is the error a script answers for a value that is not a record.
const luaUnreadable = `redis.error_reply('ERR redisstore: unreadable record')`

// claimScript is the new-key path of Reserve (its first command, or its second after a GET
// that found nothing): SET … NX GET writes the claim when the key has no record and otherwise
// returns the record untouched; a new record joins the index.
//
//	KEYS: 1 record, 2 index, 3 time index
//	ARGV: 1 claim, 2 storage TTL in ms, 3 base (see luaIndex), 4 created_at
//	→ nil                                     claimed
//	→ record                                  not claimed: the existing record, untouched
var claimScript = redis.NewScript(luaIndex + luaTrim + `
local v = redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2], 'NX', 'GET')
if v then return v end
local base = tonumber(ARGV[3])
index(base, tonumber(ARGV[2]), ARGV[4])
trim(base)
return false
`)

// reserveScript claims KEYS[1] or returns it. Reserve runs it only when its GET or claim
// script met a record that may be claimable (expired, released, or a stale lease of the same
// fingerprint); it decides on the record it finds itself, whatever Reserve read before.
//
// A new claim stores the route and the request it is given; a takeover keeps the record's
// route unless it has none, and its request the same way. A new claim of an expired record has
// a new created_at: its old time index member goes.
//
//	KEYS: 1 record, 2 index, 3 time index
//	ARGV: 1 fingerprint, 2 now, 3 lease_until, 4 expires_at, 5 storage TTL in ms, 6 op id,
//	      7 base (see luaIndex), 8 route ('' for none), 9 the request's segment ('' for none)
//	→ {0, record}                                         not claimed: the existing record, untouched
//	→ {1 or 2, token, att, created_at, route, request}    claimed (2: a takeover; att and request as stored)
var reserveScript = redis.NewScript(luaParse + luaIndex + `
local now = tonumber(ARGV[2])
local v = redis.call('GET', KEYS[1])
local prev, att, sts, crt, kind, route, req, oldcrt = 0, 1, 1, ARGV[2], 1, ARGV[8], ARGV[9], nil
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
  prev, oldcrt = tonumber(tok), c
end
if oldcrt and oldcrt ~= crt then
  redis.call('ZREM', KEYS[3], tmember(oldcrt, string.sub(KEYS[1], tonumber(ARGV[7]) + 1)))
end
local tok = string.format('%d', math.max(prev + 1, now))
att = attseg(att, sts)
redis.call('SET', KEYS[1], '1|' .. tok .. '|' .. ARGV[3] .. '|' .. att .. '|' .. crt .. '||' ..
  ARGV[4] .. '|' .. ARGV[6] .. '|' .. #ARGV[1] .. '|' .. ARGV[1] .. rseg(route) .. req, 'PX', ARGV[5])
index(tonumber(ARGV[7]), tonumber(ARGV[5]), crt)
return {kind, tok, att, crt, route, req}
`)

// completeScript stores a response under a held claim. It indexes the record again, which
// costs nothing when it is indexed already and indexes a record claimed by a version of the
// store that had no index (or no time index).
//
//	KEYS: 1 record, 2 index, 3 time index
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
index(tonumber(ARGV[7]), tonumber(ARGV[5]), crt)
return 1
`)

// releaseScript gives up a held claim: the record expires at once and keeps its token (and its
// storage TTL).
//
//	KEYS: 1 record, 2 index, 3 time index (unused)
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
//	KEYS: 1 record, 2 index, 3 time index
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
    for i = 2, 3 do
      if redis.call('PTTL', KEYS[i]) < ttl then redis.call('PEXPIRE', KEYS[i], string.format('%d', 2 * ttl)) end
    end
    return 1
  end
else
  rec = rec .. exp .. '|' .. op .. '|' .. #fp .. '|' .. fp .. rseg(route) .. req
end
redis.call('SET', KEYS[1], rec, 'KEEPTTL')
return 1
`)

// sweepScript deletes the record KEYS[1] if it expired at ARGV[1] (it may have been claimed
// again since Sweep read it), and its index members.
//
//	KEYS: 1 record, 2 index, 3 time index
//	ARGV: 1 now, 2 base (see luaIndex)
//	→ 1 deleted, 0 kept or already gone
var sweepScript = redis.NewScript(luaIndex + `
local v = redis.call('GETRANGE', KEYS[1], 0, 127)
local crt, exp = string.match(v, '^[12]|%d+|%d+|%d+s?%d*|(%d+)|%d*|(%d+)|')
if exp and tonumber(exp) <= tonumber(ARGV[1]) then
  local key = string.sub(KEYS[1], tonumber(ARGV[2]) + 1)
  redis.call('DEL', KEYS[1])
  redis.call('ZREM', KEYS[2], key)
  redis.call('ZREM', KEYS[3], tmember(crt, key))
  return 1
end
return 0
`)

// deleteScript deletes the record KEYS[1] and its index members.
//
//	KEYS: 1 record, 2 index, 3 time index
//	ARGV: 1 base (see luaIndex)
//	→ 1
var deleteScript = redis.NewScript(luaIndex + `
local key = string.sub(KEYS[1], tonumber(ARGV[1]) + 1)
local crt = string.match(redis.call('GETRANGE', KEYS[1], 0, 127), '^[12]|%d+|%d+|%d+s?%d*|(%d+)|')
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], key)
if crt then redis.call('ZREM', KEYS[3], tmember(crt, key)) end
return 1
`)

// unindexScript removes the member of the record KEYS[1] from the index KEYS[2] if the record
// is gone: List found it missing, and it may have been claimed again since.
//
//	KEYS: 1 record, 2 index, 3 time index (unused)
//	ARGV: 1 base (see luaIndex)
//	→ 1 removed, 0 the record exists (or the member was gone)
var unindexScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
return redis.call('ZREM', KEYS[2], string.sub(KEYS[1], tonumber(ARGV[1]) + 1))
`)

// untimeScript removes the member ARGV[1] from the time index KEYS[3] if its record KEYS[1] is
// gone or was created at another time than the member says: List found it so, and the
// record may have been claimed again since.
//
//	KEYS: 1 record, 2 index (unused), 3 time index
//	ARGV: 1 member
//	→ 1 removed, 0 the member is the record's (or was gone)
var untimeScript = redis.NewScript(`
local crt = string.match(redis.call('GETRANGE', KEYS[1], 0, 127), '^[12]|%d+|%d+|%d+s?%d*|(%d+)|')
if crt and string.format('%016d', tonumber(crt)) == string.sub(ARGV[1], 1, 16) then return 0 end
return redis.call('ZREM', KEYS[3], ARGV[1])
`)

// backfillScript adds the records KEYS[3], KEYS[4], … (of one shard, whose index is KEYS[1]
// and time index KEYS[2]) to the time index, as created at the time they hold, and makes the
// time index live as long as the index: it indexes records written by a version of the store
// that had no time index. Records gone are skipped.
//
//	KEYS: 1 index, 2 time index, 3… records
//	ARGV: 1 base (see luaIndex)
//	→ how many members it added
var backfillScript = redis.NewScript(luaIndex + `
local n, base = 0, tonumber(ARGV[1])
for i = 3, #KEYS do
  local crt = string.match(redis.call('GETRANGE', KEYS[i], 0, 127), '^[12]|%d+|%d+|%d+s?%d*|(%d+)|')
  if crt then
    n = n + redis.call('ZADD', KEYS[2], 0, tmember(crt, string.sub(KEYS[i], base + 1)))
  end
end
local ttl = redis.call('PTTL', KEYS[1])
if ttl > 0 and redis.call('PTTL', KEYS[2]) < ttl then redis.call('PEXPIRE', KEYS[2], ttl) end
return n
`)

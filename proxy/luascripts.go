package proxy

import "github.com/redlock-proxy/redlock-proxy/internal/resp"

// Every script this package runs on the backends lives here: undos,
// reads, the forced delete and FENCE's two phases (and a semaphore's in
// luascripts_sem.go). The lock roles'
// reference scripts live with the classifier (script/reference.go), the
// identity marker and continuity check with the links (netio).
var (
	// undoLaterScript is the undo sent on a later connection, after the
	// connection that carried the command was lost. A copy of the token
	// there is this attempt's if it was set (now - (ttl - PTTL), on the
	// master's clock) before the attempt's reply could leave (ARGV[4], on the
	// master's clock), or within the last ARGV[3] ms (a late SET that a hung
	// master, resumed, ran together with this undo); either is deleted. A
	// copy set in between is a retry with the same token, granted since
	// through another proxy: it stays. So does a copy with more than ttl
	// left, or no expiry: the attempt set it with ttl, so it was re-armed
	// since (a same-token holder that lengthened its lock).
	undoLaterScript = resp.NewScript([]byte(`local n = 0
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
for _, k in ipairs(KEYS) do
  if redis.call('get', k) == ARGV[1] then
    local p = redis.call('pttl', k)
    if p >= 0 and p <= ttl and (p >= ttl - tonumber(ARGV[3]) or now - (ttl - p) <= tonumber(ARGV[4])) then n = n + redis.call('del', k) end
  end
end
return n`))
	// undoScript deletes every given key that still holds the token: the
	// compare-and-delete that undoes a partial acquisition.
	undoScript = resp.NewScript([]byte(`local n = 0
for _, k in ipairs(KEYS) do
  if redis.call('get', k) == ARGV[1] then n = n + redis.call('del', k) end
end
return n`))
	// readScript reads a key's value and PTTL atomically, unless the value
	// is longer than ARGV[1] (max_token): the backend links are shared, so
	// a read never brings back more than a lock token. A key of another
	// type (a hash lock, a lock of several owners) answers {false, PTTL,
	// its type}: such a lock is read by its type, whoever holds it.
	readScript = resp.NewScript([]byte(`local t = redis.call('type', KEYS[1]).ok
if t ~= 'string' and t ~= 'none' then return {false, redis.call('pttl', KEYS[1]), t} end
if redis.call('strlen', KEYS[1]) > tonumber(ARGV[1]) then
  return redis.error_reply('TOOLONG the value is longer than max_token')
end
return {redis.call('get', KEYS[1]), redis.call('pttl', KEYS[1])}`))
	// delScript is DEL of a lock key (KEYS[1]) that also deletes its FENCE
	// state (KEYS[2]) and, for a semaphore, its permits (KEYS[3]). It
	// answers {DEL's answer (1 when the lock key or the semaphore was
	// there), the value it deleted}: the value (the holder's token, for the
	// log of a forced unlock) is false when it was not a string or was
	// longer than ARGV[1] (max_token).
	delScript = resp.NewScript([]byte(`local v = redis.pcall('get', KEYS[1])
if type(v) ~= 'string' or #v > tonumber(ARGV[1]) then v = false end
local n = redis.call('del', KEYS[1])
redis.call('del', KEYS[2])
return {math.max(n, redis.call('del', KEYS[3])), v}`))
	// getScript is GET bounded like readScript.
	getScript = resp.NewScript([]byte(`if redis.call('strlen', KEYS[1]) > tonumber(ARGV[1]) then
  return redis.error_reply('TOOLONG the value is longer than max_token')
end
return redis.call('get', KEYS[1])`))
)

// undoOwnersScript undoes an acquire of a lock of several owners (a
// sorted set, spec.ShapeOwners) where it took or joined the lock: the
// caller's member is removed, and the marker if it carries the caller's
// deadline (the acquire set both), and the key expires with its last
// member. ARGV: token, marker, then the TTL, how recent and the instant,
// as undoScript and undoLaterScript take them.
var undoOwnersScript = resp.NewScript([]byte(`local k, tok, marker = KEYS[1], ARGV[1], ARGV[2]
local s = redis.call('zscore', k, tok)
if not s then return 0 end
redis.call('zrem', k, tok)
if marker ~= '' and redis.call('zscore', k, marker) == s then redis.call('zrem', k, marker) end
local top = redis.call('zrevrange', k, 0, 0, 'withscores')[2]
if top then redis.call('pexpireat', k, top) end
return 1`))

// undoOwnersLaterScript is undoOwnersScript for a later connection, as
// undoLaterScript is undoScript's: the caller's member is this attempt's
// if its deadline says it was set (deadline - ttl, on the master's clock)
// before the attempt's reply could leave, or within the last ARGV[4] ms.
var undoOwnersLaterScript = resp.NewScript([]byte(`local k, tok, marker = KEYS[1], ARGV[1], ARGV[2]
local s = redis.call('zscore', k, tok)
if not s then return 0 end
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl, p = tonumber(ARGV[3]), tonumber(s) - now
if not (p >= 0 and p <= ttl and (p >= ttl - tonumber(ARGV[4]) or now - (ttl - p) <= tonumber(ARGV[5]))) then return 0 end
redis.call('zrem', k, tok)
if marker ~= '' and redis.call('zscore', k, marker) == s then redis.call('zrem', k, marker) end
local top = redis.call('zrevrange', k, 0, 0, 'withscores')[2]
if top then redis.call('pexpireat', k, top) end
return 1`))

// undoHashScript undoes an acquire of hash locks (spec.ShapeHash):
// each key is deleted if it is a hash whose one field is its token (ARGV:
// one token per key, then the TTL, how recent and the instant, as
// undoPerKeyScript).
var undoHashScript = resp.NewScript([]byte(`local n = 0
for i, k in ipairs(KEYS) do
  if redis.call('type', k).ok == 'hash' and redis.call('hlen', k) == 1 and redis.call('hexists', k, ARGV[i]) == 1 then
    n = n + redis.call('del', k)
  end
end
return n`))

// undoHashLaterScript is undoHashScript for a later connection, as
// undoPerKeyLaterScript is undoPerKeyScript's.
var undoHashLaterScript = resp.NewScript([]byte(`local n = 0
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[#KEYS + 1])
for i, k in ipairs(KEYS) do
  if redis.call('type', k).ok == 'hash' and redis.call('hlen', k) == 1 and redis.call('hexists', k, ARGV[i]) == 1 then
    local p = redis.call('pttl', k)
    if p >= 0 and p <= ttl and (p >= ttl - tonumber(ARGV[#KEYS + 2]) or now - (ttl - p) <= tonumber(ARGV[#KEYS + 3])) then n = n + redis.call('del', k) end
  end
end
return n`))

// undoPerKeyScript undoes an acquire whose keys have different tokens:
// each key is deleted if it still holds its own.
var undoPerKeyScript = resp.NewScript([]byte(`local n = 0
for i, k in ipairs(KEYS) do
  if redis.call('get', k) == ARGV[i] then n = n + redis.call('del', k) end
end
return n`))

// undoPerKeyLaterScript is undoPerKeyScript for a later connection, as
// undoLaterScript is undoScript's: a key is deleted only if it was set
// recently enough to be this attempt's (ARGV: one token per key, then the
// TTL and how recent, in ms), so a retry with the same token that another
// proxy granted since is spared.
var undoPerKeyLaterScript = resp.NewScript([]byte(`local n = 0
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[#KEYS + 1])
for i, k in ipairs(KEYS) do
  if redis.call('get', k) == ARGV[i] then
    local p = redis.call('pttl', k)
    if p >= 0 and p <= ttl and (p >= ttl - tonumber(ARGV[#KEYS + 2]) or now - (ttl - p) <= tonumber(ARGV[#KEYS + 3])) then n = n + redis.call('del', k) end
  end
end
return n`))

// fenceHolds defines holds(key, token) for the FENCE scripts: the lock
// holds the token when it is a string of that value, or a hash whose one
// field is the token (a hash lock, whose field may count re-entries, as
// Redisson's RLock and RFencedLock keep theirs).
const fenceHolds = `local function holds(k, tok)
  local t = redis.call('type', k).ok
  if t == 'string' then return redis.call('get', k) == tok end
  return t == 'hash' and redis.call('hlen', k) == 1 and redis.call('hexists', k, tok) == 1
end
`

var (
	// fencePrepare: KEYS lock, state, counter; ARGV token, ballot. Returns
	// {0} when the lock does not hold the token, else {1, pttl, promised,
	// higher ballot, accepted ballot, accepted value, counter, now ms}.
	fencePrepare = resp.NewScript([]byte(fenceHolds + `if not holds(KEYS[1], ARGV[1]) then return {0} end
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local pttl = redis.call('pttl', KEYS[1])
local s = redis.call('hmget', KEYS[2], 'tok', 'pb', 'ab', 'av')
if s[1] ~= ARGV[1] then s = {ARGV[1], '` + fenceZero + `', '` + fenceZero + `', '` + fenceZero + `'} end
local counter = redis.call('get', KEYS[3]) or '` + fenceZero + `'
if ARGV[2] <= s[2] then return {1, pttl, 0, s[2], '', '', counter, now} end
redis.call('hset', KEYS[2], 'tok', ARGV[1], 'pb', ARGV[2], 'ab', s[3], 'av', s[4])
if pttl > 0 then redis.call('pexpire', KEYS[2], pttl) end
return {1, pttl, 1, '', s[3], s[4], counter, now}`))
	// fenceAccept: KEYS as above; ARGV token, ballot, value. Returns 1 when
	// accepted.
	fenceAccept = resp.NewScript([]byte(fenceHolds + `if not holds(KEYS[1], ARGV[1]) then return 0 end
local s = redis.call('hmget', KEYS[2], 'tok', 'pb')
if s[1] ~= ARGV[1] then s[2] = '` + fenceZero + `' end
if ARGV[2] < s[2] then return 0 end
redis.call('hset', KEYS[2], 'tok', ARGV[1], 'pb', ARGV[2], 'ab', ARGV[2], 'av', ARGV[3])
local pttl = redis.call('pttl', KEYS[1])
if pttl > 0 then redis.call('pexpire', KEYS[2], pttl) end
local c = redis.call('get', KEYS[3])
if not c or c < ARGV[3] then redis.call('set', KEYS[3], ARGV[3]) end
return 1`))
)

// The operator's view of the key space (keyspace.go, lockinfo.go): reads
// that change nothing.
var (
	// scanScript is SCAN with the arguments given (cursor, then COUNT,
	// MATCH, TYPE). KEYS[1] only routes it: on a Redis Cluster backend, to
	// the shard that owns its slot, whose master's keys it scans.
	scanScript = resp.NewScript([]byte(`return redis.call('scan', unpack(ARGV))`))
	// digestScript answers, for each key, false when it holds no string,
	// else {SHA1 of its value, PTTL}: what the majority view needs to
	// compare values across backends, whatever their length.
	digestScript = resp.NewScript([]byte(`local out = {}
for i, k in ipairs(KEYS) do
  local v = redis.pcall('get', k)
  if type(v) == 'string' then out[i] = {redis.sha1hex(v), redis.call('pttl', k)} else out[i] = false end
end
return out`))
	// lockInfoScript reads a lock (KEYS[1]) and its FENCE state (KEYS[2]):
	// {value (false when none, not a string, or longer than ARGV[1]),
	// PTTL, the state's token, accepted ballot, accepted number, the
	// value's length}.
	lockInfoScript = resp.NewScript([]byte(`local v = redis.pcall('get', KEYS[1])
local n = 0
if type(v) ~= 'string' then v = false else n = #v end
if n > tonumber(ARGV[1]) then v = false end
local s = redis.call('hmget', KEYS[2], 'tok', 'ab', 'av')
return {v, redis.call('pttl', KEYS[1]), s[1], s[2], s[3], n}`))
)

// hashFieldScript reads a hash lock's field for HGET and HEXISTS: {0} for
// a missing key, {-1} for a key of another type, {1} for a hash without
// the field, {2, value} with it, unless the value is longer than ARGV[2]
// (max_token). KEYS[1] the key, ARGV[1] the field.
var hashFieldScript = resp.NewScript([]byte(`local t = redis.call('type', KEYS[1]).ok
if t == 'none' then return {0} end
if t ~= 'hash' then return {-1} end
local v = redis.call('hget', KEYS[1], ARGV[1])
if not v then return {1} end
if #v > tonumber(ARGV[2]) then
  return redis.error_reply('TOOLONG the value is longer than max_token')
end
return {2, v}`))

// holderScript reads who holds a hash lock (its one field), bounded like
// getScript: the field's name, or false for a missing key or any other.
var holderScript = resp.NewScript([]byte(`if redis.call('type', KEYS[1]).ok ~= 'hash' or redis.call('hlen', KEYS[1]) ~= 1 then return false end
local f = redis.call('hkeys', KEYS[1])[1]
if #f > tonumber(ARGV[1]) then
  return redis.error_reply('TOOLONG the value is longer than max_token')
end
return f`))

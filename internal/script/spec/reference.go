package spec

import (
	"strconv"

	"github.com/redlock-proxy/redlock-proxy/internal/base/keyslot"
	"github.com/redlock-proxy/redlock-proxy/internal/base/resp"
)

// The reference scripts: the proxy's own Lua for each role, which the
// backends run in place of a classified script's text. Each reads every
// key's state into a case code (the Case values), acts as the role does
// (semantics.go says the same in Go), and answers with what the proxy
// needs to vote and to fill the client's reply template:
//
//   - compact (one key, a template that needs no TTL or value): one
//     integer, acted + 2 * case;
//   - detailed: {acted, then per key: case, PTTL before, value or nil,
//     PTTL after}.
//
// KEYS: the n lock keys, then (roles that write, when the proxy keeps
// state beside its locks) one companion key per lock key, which lives
// exactly as long as its grant: an extend re-arms it, a release deletes it
// with the lock, and an acquisition of a free key deletes what an earlier
// grant left.
//
// ARGV: [1] detailed (0/1), [2] ownership prefix length (0: the whole
// token), [3] least PTTL in ms that is not "too little" (0: no minimum),
// [4] TTL in ms, [5] flags (1: add the TTL to what is left, 2: act on a
// key without TTL, 16: a latch), [6] longest TTL in ms an added TTL may reach, [7] n,
// [8] longest value a detailed answer brings back (a longer one comes back
// as nil), then one token per key (none for a query without token), then,
// for an extend that sets a TTL, the extend's nonce (see refSecondStep),
// then the shape's own value (the marker, the hash's field value).
//
// A call with a latch (Layout.Latch; flag 16) passes the latch key after
// the companions, last of KEYS, and its TTL in ms last of ARGV: see
// latchBody.

// The way a lock is read and taken, by shape: read(i, t) is the value of
// lock key i (false when missing), take(i, t, ms) sets it to token t for
// ms. A hash lock's value is its one field, the owner's token (any other
// hash, or another type, reads as a value that is not t); it is taken as
// that one field, with the class's field value (after the tokens in ARGV).
// An extend also reads a read-write lock's write lock (fields "mode" =
// "write" and the owner's) as its owner's: Redisson's write lock, which
// its watchdog renews as a lock of one owner (hashExtendAccess). No other
// role acts on it: see Class.ownsItem.
const (
	stringAccess = `local function read(i, t) return redis.call('get', KEYS[i]) end
local function take(i, t, ms) redis.call('set', KEYS[i], t, 'PX', ms) end
`
	hashAccess       = hashReadHead + `1 then return t end` + hashReadTail
	hashExtendAccess = hashReadHead + `1 or (l == 2 and redis.call('hget', KEYS[i], 'mode') == 'write') then return t end` + hashReadTail
	hashReadHead     = `local fv = ARGV[nargv]
local function read(i, t)
  local ty = redis.call('type', KEYS[i]).ok
  if ty == 'none' then return false end
  if ty == 'hash' and t and t ~= 'mode' and redis.call('hexists', KEYS[i], t) == 1 then
    local l = redis.call('hlen', KEYS[i])
    if l == `
	hashReadTail = `
  end
  return (t or '') .. '\0'
end
local function take(i, t, ms)
  redis.call('del', KEYS[i])
  redis.call('hset', KEYS[i], t, fv)
  redis.call('pexpire', KEYS[i], ms)
end
`
)

// anyAccess reads a key of any type, for the delete reference: a string's
// value, another type's name (a delete compares no token).
const anyAccess = `local function read(i, t)
  local ty = redis.call('type', KEYS[i]).ok
  if ty == 'none' then return false end
  if ty == 'string' then return redis.call('get', KEYS[i]) end
  return ty
end
`

const refHead = `local detail = ARGV[1] == '1'
local p, low, ttl, flags, cap = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local n, maxv = tonumber(ARGV[7]), tonumber(ARGV[8])
local additive, nottl = flags % 2 == 1, flags % 4 >= 2
-- A latch (flag 16): the last key, its TTL the last argument; nkeys and
-- nargv leave them out.
local latched = flags % 32 >= 16
local nkeys, nargv = #KEYS, #ARGV
if latched then nkeys, nargv = nkeys - 1, nargv - 1 end
`

const refPrelude = `-- asked: set by an extend that sets (not adds) a TTL, which keeps the
-- longer of that TTL and what is left, and reports the TTL asked.
local asked = nil
local cs, pts, vs = {}, {}, {}
for i = 1, n do
  local v = read(i, ARGV[8 + i])
  local pt = redis.call('pttl', KEYS[i])
  local t = ARGV[8 + i]
  local c = 0
  if v then
    c = 4
    if t and ((p == 0 and v == t) or (p > 0 and string.sub(v, 1, p) == string.sub(t, 1, p))) then c = 1 end
    if pt == -1 then c = c + 1 elseif pt < low then c = c + 2 end
  end
  cs[i], pts[i], vs[i] = c, pt, v
end
local function reply(acted)
  if not detail then return acted + 2 * cs[1] end
  local out = {acted}
  for i = 1, n do
    out[#out + 1] = cs[i]
    out[#out + 1] = pts[i]
    if vs[i] and #vs[i] > maxv then out[#out + 1] = false else out[#out + 1] = vs[i] end
    local after = redis.call('pttl', KEYS[i])
    -- Kept longer: report the TTL the caller asked, and counts on.
    if asked and acted == 1 and after > asked then after = asked end
    out[#out + 1] = after
  end
  return out
end
-- rearm sets lock key i's TTL, and its companion's.
local function rearm(i, ms)
  redis.call('pexpire', KEYS[i], ms)
  if nkeys > n then redis.call('pexpire', KEYS[n + i], ms) end
end
-- forget deletes lock key i's companion.
local function forget(i)
  if nkeys > n then redis.call('del', KEYS[n + i]) end
end
-- mark leaves the extend's nonce in lock key i's companion where it kept
-- the key longer than asked, for its second step, and clears any earlier
-- nonce: a second step sets the TTL asked only while no later write
-- touched the key.
local nonce = ARGV[9 + n]
local function mark(i, kept)
  if nkeys <= n then return end
  if kept then
    redis.call('hset', KEYS[n + i], 'xv', nonce)
    redis.call('pexpire', KEYS[n + i], redis.call('pttl', KEYS[i]))
  else
    redis.call('hdel', KEYS[n + i], 'xv')
  end
end
`

// The role bodies of the string and hash references.
const (
	acquireBody = `for i = 1, n do
  if cs[i] ~= 0 then return reply(0) end
end
for i = 1, n do
  take(i, ARGV[8 + i], ttl)
  forget(i)
end
return reply(1)`
	releaseBody = `local all = 1
for i = 1, n do
  if cs[i] == 1 or cs[i] == 2 then
    redis.call('del', KEYS[i])
    forget(i)
  else
    all = 0
  end
end
return reply(all)`
	extendBody = `if not additive then asked = ttl end
for i = 1, n do
  local c = cs[i]
  if not (c == 1 or (c == 2 and nottl and not additive)) then return reply(0) end
  if additive and pts[i] + ttl > cap then return reply(0) end
end
for i = 1, n do
  if additive then
    rearm(i, pts[i] + ttl)
    mark(i, false)
  else
    local ms = math.max(ttl, pts[i])
    rearm(i, ms)
    mark(i, ms > ttl)
  end
end
return reply(1)`
	extendOrAcquireBody = `local c = cs[1]
if c == 0 then
  take(1, ARGV[9], ttl)
  forget(1)
  return reply(1)
end
if c == 1 or (c == 2 and nottl) then
  asked = ttl
  local ms = math.max(ttl, pts[1])
  take(1, ARGV[9], ms)
  if nkeys > n then redis.call('pexpire', KEYS[n + 1], ms) end
  mark(1, ms > ttl)
  return reply(1)
end
return reply(0)`
	// A reentrant lock (Layout.Counted): the caller's holds are counted in
	// its field. countHead reads the count into each own key's case (11:
	// held more than once) and into its value slot, which a detailed
	// answer brings back; tally leaves the op's nonce in the companion, so
	// that a repair to the majority's count (refCountRepair) applies only
	// where no later write came.
	countHead = `for i = 1, n do
  if cs[i] == 1 or cs[i] == 2 then
    local h = tonumber(redis.call('hget', KEYS[i], ARGV[8 + i])) or 0
    vs[i] = tostring(h)
    if cs[i] == 1 and h > 1 then cs[i] = 11 end
  end
end
local function tally(i)
  if nkeys <= n or not nonce then return end
  redis.call('hset', KEYS[n + i], 'cn', nonce)
  redis.call('pexpire', KEYS[n + i], redis.call('pttl', KEYS[i]))
end
`
	countEnterBody = countHead + `local c = cs[1]
if c == 0 or c == 1 or c == 11 or (c == 2 and nottl) then
  redis.call('hincrby', KEYS[1], ARGV[9], 1)
  if c == 0 then forget(1) end
  rearm(1, math.max(ttl, pts[1]))
  tally(1)
  return reply(1)
end
return reply(0)`
	countReleaseBody = countHead + `local c = cs[1]
if c == 1 or c == 2 or c == 11 then
  if redis.call('hincrby', KEYS[1], ARGV[9], -1) > 0 then
    if ttl > 0 then rearm(1, math.max(ttl, pts[1])) end
    tally(1)
  else
    redis.call('del', KEYS[1])
    forget(1)
  end
  return reply(1)
end
return reply(0)`
	queryBody  = `return reply(1)`
	deleteBody = `local any = 0
for i = 1, n do
  if cs[i] ~= 0 then any = 1 end
  redis.call('del', KEYS[i])
  forget(i)
end
return reply(any)`
)

// latchBody runs a role's body (act) under a latch (Layout.Latch): when
// the latch holds this master's answer to an earlier call with the same
// latch key, that answer again, and nothing done; otherwise the body, and,
// when it acted, its answer recorded in the latch for the latch's TTL. A
// latch holding anything else is answered as a call that did nothing.
const latchBody = `
if not latched then return act() end
local L = KEYS[nkeys + 1]
local got = redis.call('get', L)
if got then
  if string.sub(got, 1, 4) == 'rp1:' then return cmsgpack.unpack(string.sub(got, 5)) end
  return reply(0)
end
local out = act()
local acted = out
if type(out) == 'table' then acted = out[1] else acted = out % 2 end
if acted == 1 then redis.call('set', L, 'rp1:' .. cmsgpack.pack(out), 'PX', ARGV[#ARGV]) end
return out`

// refScript makes a reference: its first line names it, then the head,
// the shape's access, the prelude, and the role's body run under the
// latch, if the call has one.
func refScript(title, access, body string) *resp.Script {
	return resp.NewScript([]byte("-- redlock-proxy " + title + "\n" + refHead + access + refPrelude + "local function act()\n" + body + "\nend" + latchBody))
}

// refReleaseOne is refRelease for the commonest call, a compact release
// of one string key with no latch: the same cases and reply, without the
// general prelude (its arguments, tables and functions cost a master
// about half of the release's time). KEYS: the key, then its companion
// when there is one; ARGV: [1] ownership prefix length (0: the whole
// token), [2] least PTTL in ms that is not "too little", [3] the token.
var refReleaseOne = resp.NewScript([]byte(`-- redlock-proxy release (one key, compact): delete it if it holds its token
local v = redis.call('get', KEYS[1])
if not v then return 0 end
local p, t = tonumber(ARGV[1]), ARGV[3]
local c = 4
if (p == 0 and v == t) or (p > 0 and string.sub(v, 1, p) == string.sub(t, 1, p)) then c = 1 end
local pt = redis.call('pttl', KEYS[1])
if pt == -1 then c = c + 1 elseif pt < tonumber(ARGV[2]) then c = c + 2 end
if c == 1 or c == 2 then
  redis.call('del', KEYS[1])
  if #KEYS > 1 then redis.call('del', KEYS[2]) end
  return 1 + 2 * c
end
return 2 * c`))

// Reference scripts by role.
var (
	refAcquire         = refScript("acquire: every key is free, then take them all", stringAccess, acquireBody)
	refRelease         = refScript("release: delete each key that holds its token", stringAccess, releaseBody)
	refExtend          = refScript("extend: every key holds its token, then re-arm them all, never shorter", stringAccess, extendBody)
	refExtendOrAcquire = refScript("extend-or-acquire: take the key if free, re-arm it (never shorter) if it holds the token", stringAccess, extendOrAcquireBody)
	refQuery           = refScript("query: read the keys", stringAccess, queryBody)
	refDelete          = refScript("delete: delete the keys whatever holds them", anyAccess, deleteBody)

	refHashAcquire         = refScript("acquire (hash): every key is free, then take them all", hashAccess, acquireBody)
	refHashRelease         = refScript("release (hash): delete each key that holds its token", hashAccess, releaseBody)
	refHashExtend          = refScript("extend (hash): every key holds its token, then re-arm them all, never shorter", hashExtendAccess, extendBody)
	refHashExtendOrAcquire = refScript("extend-or-acquire (hash): take the key if free, re-arm it (never shorter) if it holds the token", hashAccess, extendOrAcquireBody)
	refHashQuery           = refScript("query (hash): read the keys", hashAccess, queryBody)

	refCountEnter   = refScript("take or enter again (reentrant hash): one more hold if free or the caller's, re-armed never shorter", hashAccess, countEnterBody)
	refCountRelease = refScript("release one hold (reentrant hash): one hold less, the lock deleted at none", hashAccess, countReleaseBody)

	// refCountRepair sets a reentrant lock's count of holds to the one a
	// majority of masters agreed on, after an op that decided: on a key
	// that is still the caller's one field and whose companion still holds
	// the op's nonce (no later write came), the count, or at 0 the key's
	// deletion. KEYS: the lock, its companion; ARGV: token, nonce, count.
	refCountRepair = resp.NewScript([]byte(`-- redlock-proxy reentrant lock repair: the majority's count of holds
if redis.call('hget', KEYS[2], 'cn') ~= ARGV[2] then return 0 end
if redis.call('type', KEYS[1]).ok ~= 'hash' or redis.call('hlen', KEYS[1]) ~= 1 or redis.call('hexists', KEYS[1], ARGV[1]) == 0 then return 0 end
local d = tonumber(ARGV[3])
if d <= 0 then
  redis.call('del', KEYS[1], KEYS[2])
  return 1
end
redis.call('hset', KEYS[1], ARGV[1], d)
return 1`))

	// refSecondStep is the second step of an extend that kept a key longer
	// than asked (an extend never shortens a lock before it succeeded): once
	// the success left, it sets the TTL asked on each key that still holds
	// the caller's token and the extend's nonce, which every later write of
	// the key clears (another extend, a release, an acquisition). So a
	// second step that arrives late, through a slower proxy or behind
	// later commands of the same pipeline, never undoes what a later
	// command did. KEYS: the n lock keys, then their companions; ARGV: [1]
	// TTL ms, [2] nonce, [3] ownership prefix length, then one token per
	// key. A string lock holds its token as its value, a hash lock as its
	// one field.
	RefSecondStep = resp.NewScript([]byte(`-- redlock-proxy extend, second step: the TTL asked where the first step kept it longer
local n = #KEYS / 2
local p = tonumber(ARGV[3])
for i = 1, n do
  local t, owns = ARGV[3 + i], false
  local ty = redis.call('type', KEYS[i]).ok
  if ty == 'string' then
    local v = redis.call('get', KEYS[i])
    owns = (p == 0 and v == t) or (p > 0 and string.sub(v, 1, p) == string.sub(t, 1, p))
  elseif ty == 'hash' then
    owns = redis.call('hexists', KEYS[i], t) == 1
  end
  if owns and redis.call('hget', KEYS[n + i], 'xv') == ARGV[2] then
    redis.call('pexpire', KEYS[i], ARGV[1])
    redis.call('pexpire', KEYS[n + i], ARGV[1])
    redis.call('hdel', KEYS[n + i], 'xv')
  end
end
return 1`))
)

// Locks of several owners (ShapeOwners, one key): the key is a sorted set
// of owners scored with their deadlines, exclusive when it holds the
// marker (ARGV[10]) or, without one, a single owner. The case codes are
// the Case values (own-shared 8, own-shared-others 9, other-shared 10); a
// value that is not a sorted set is another holder's. Acting removes the
// expired members, scores the caller's member (never earlier than it was)
// and, for an exclusive lock, the marker with now + TTL, and lets the key
// expire with its last member. ARGV as above, the token at [9] and the
// marker at [10]; flags 4: an exclusive acquire takes a lock the caller
// holds shared alone, 8: a shared acquire takes one it holds exclusively.
const ownersPrelude = `local detail = ARGV[1] == '1'
local ttl, flags = tonumber(ARGV[4]), tonumber(ARGV[5])
local promotes, demotes = flags % 8 >= 4, flags % 16 >= 8
local tok, marker = ARGV[9], ARGV[10]
local K = KEYS[1]
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local c, mine = 0, nil
local pt = redis.call('pttl', K)
local ty = redis.call('type', K).ok
if ty == 'zset' then
  local owners = redis.call('zcount', K, '(' .. now, '+inf')
  local ms = marker ~= '' and redis.call('zscore', K, marker)
  local marked = ms and tonumber(ms) > now
  if marked then owners = owners - 1 end
  mine = tok and tok ~= marker and redis.call('zscore', K, tok)
  if mine and tonumber(mine) <= now then mine = nil end
  if owners > 0 then
    local excl = owners == 1 and (marked or marker == '')
    if mine then
      if excl then c = 1 elseif owners == 1 then c = 8 else c = 9 end
    elseif excl then c = 4 else c = 10 end
  end
elseif ty ~= 'none' then
  c = 4
end
local function reply(acted)
  if not detail then return acted + 2 * c end
  return {acted, c, pt, false, redis.call('pttl', K)}
end
local function settle()
  local top = redis.call('zrevrange', K, 0, 0, 'withscores')[2]
  if top then redis.call('pexpireat', K, top) end
end
local function score(exclusive)
  redis.call('zremrangebyscore', K, '-inf', now)
  local d = now + ttl
  if mine and tonumber(mine) > d then d = tonumber(mine) end
  redis.call('zadd', K, d, tok)
  if exclusive and marker ~= '' then redis.call('zadd', K, d, marker) end
  settle()
end
`

var (
	refOwnersAcquire = resp.NewScript([]byte("-- redlock-proxy acquire (owners): a free lock, exclusively\n" + ownersPrelude + `if c == 0 or c == 8 and promotes then score(true) return reply(1) end
return reply(0)`))
	refOwnersExtendOrAcquire = resp.NewScript([]byte("-- redlock-proxy extend-or-acquire (owners): a free lock or the caller's, exclusively\n" + ownersPrelude + `if c == 0 or c == 1 or c == 8 and promotes then score(true) return reply(1) end
return reply(0)`))
	refOwnersShare = resp.NewScript([]byte("-- redlock-proxy share (owners): a lock no other holds exclusively, shared\n" + ownersPrelude + `if c == 0 or c == 8 or c == 9 or c == 10 or c == 1 and demotes then
  if c == 1 and marker ~= '' then redis.call('zrem', K, marker) end
  score(false)
  return reply(1)
end
return reply(0)`))
	refOwnersExtend = resp.NewScript([]byte("-- redlock-proxy extend (owners): the caller's lock, never shorter\n" + ownersPrelude + `if c == 1 or c == 8 or c == 9 then score(c == 1) return reply(1) end
return reply(0)`))
	refOwnersRelease = resp.NewScript([]byte("-- redlock-proxy release (owners): the caller's member, and the marker of its exclusive lock\n" + ownersPrelude + `if c == 1 or c == 8 or c == 9 then
  redis.call('zrem', K, tok)
  if c == 1 and marker ~= '' then redis.call('zrem', K, marker) end
  settle()
  return reply(1)
end
return reply(0)`))
	RefOwnersQuery = resp.NewScript([]byte("-- redlock-proxy query (owners): read the lock\n" + ownersPrelude + `return reply(1)`))
)

// evalsha holds "EVALSHA <sha>" encoded, per reference script.
var evalsha = func() map[*resp.Script][]byte {
	m := map[*resp.Script][]byte{}
	for _, sc := range references {
		m[sc] = resp.AppendBulkString(resp.AppendBulkString(nil, "EVALSHA"), sc.Sha)
	}
	return m
}()

// references are every reference script.
var references = []*resp.Script{refAcquire, refRelease, refReleaseOne, refExtend, refExtendOrAcquire, refQuery, refDelete,
	refOwnersAcquire, refOwnersExtendOrAcquire, refOwnersShare, refOwnersExtend, refOwnersRelease, RefOwnersQuery,
	refHashAcquire, refHashRelease, refHashExtend, refHashExtendOrAcquire, refHashQuery, RefSecondStep,
	refCountEnter, refCountRelease, refCountRepair}

// Reference returns the script the backends run for the class's role.
func (c *Class) Reference() *resp.Script {
	if c.Shape == ShapeOwners {
		switch c.Role {
		case RoleAcquire:
			return refOwnersAcquire
		case RoleExtendOrAcquire:
			return refOwnersExtendOrAcquire
		case RoleShare:
			return refOwnersShare
		case RoleExtend:
			return refOwnersExtend
		case RoleRelease:
			return refOwnersRelease
		}
		return RefOwnersQuery
	}
	if c.Shape == ShapeHash && c.Counted {
		switch c.Role {
		case RoleExtendOrAcquire:
			return refCountEnter
		case RoleRelease:
			return refCountRelease
		}
	}
	if c.Shape == ShapeHash {
		switch c.Role {
		case RoleAcquire:
			return refHashAcquire
		case RoleRelease:
			return refHashRelease
		case RoleExtend:
			return refHashExtend
		case RoleExtendOrAcquire:
			return refHashExtendOrAcquire
		}
		return refHashQuery
	}
	switch c.Role {
	case RoleDelete:
		return refDelete
	case RoleAcquire:
		return refAcquire
	case RoleRelease:
		return refRelease
	case RoleExtend:
		return refExtend
	case RoleExtendOrAcquire:
		return refExtendOrAcquire
	}
	return refQuery
}

// Detailed reports whether the backends must answer in detail: several
// keys, or a reply template that shows a TTL or a value.
func (c *Class) Detailed(numkeys int) bool {
	if !c.Finished {
		c = c.finishedCopy()
	}
	return numkeys > 1 || c.detail || c.Counted
}

// uses reports whether the template has a hole of one of the sources.
func (t *Template) uses(srcs ...Source) bool {
	if t == nil {
		return false
	}
	if t.Kind != resp.KindArray {
		for _, s := range srcs {
			if t.Src == s && s != SrcConst {
				return true
			}
		}
	}
	for _, e := range t.Elems {
		if e.uses(srcs...) {
			return true
		}
	}
	return false
}

// CallArgs are the parts of a reference call the proxy decides: the TTL
// (acquire and extend roles), the least PTTL (from the call's minimum
// argument), and the longest TTL an added TTL may reach (max_ttl).
type CallArgs struct {
	TTLms, LowMs, CapMs int64
	Detailed            bool
	// MaxValue bounds the values a detailed answer brings back (0: the
	// size of a lock token, 1 KiB).
	MaxValue int
	// Companion, when set, names each lock key's companion: Companion, the
	// hash tag of the key's slot in braces, then the key (see the KEYS
	// above, and keyslot.Companion).
	Companion string
	// Nonce, for an extend that sets a TTL, marks the keys its first step
	// kept longer than asked, for its second step (AppendSecondStep). It
	// needs Companion.
	Nonce string
	// ReadOnly sends the query reference instead of the role's: the
	// backends only report the keys' states, for a call the proxy already
	// knows must fail (an extend whose TTL cannot leave any validity).
	ReadOnly bool
	// Latch, when set, is the call's latch key (Layout.Latch), kept for
	// LatchMs: the last key and argument of the reference call.
	Latch   []byte
	LatchMs int64
}

// ReferenceFor returns the script a call of nkeys keys with these
// arguments runs: the role's reference, the query reference for a
// read-only call, or refReleaseOne for a compact release of one key.
func (c *Class) ReferenceFor(nkeys int, a CallArgs) *resp.Script {
	if c.releasesOne(nkeys, a) {
		return refReleaseOne
	}
	if a.ReadOnly {
		switch c.Shape {
		case ShapeOwners:
			return RefOwnersQuery
		case ShapeHash:
			return refHashQuery
		}
		return refQuery
	}
	return c.Reference()
}

// releasesOne reports whether a call runs refReleaseOne: a compact
// release, with a token, of one string key, with no latch.
func (c *Class) releasesOne(nkeys int, a CallArgs) bool {
	return nkeys == 1 && c.Role == RoleRelease && c.Shape == ShapeString && !c.Counted &&
		c.Tokens != nil && !a.Detailed && !a.ReadOnly && a.Latch == nil
}

// AppendReference encodes EVALSHA of the class's reference script for a
// call with these keys and arguments.
func (c *Class) AppendReference(dst []byte, keys, argv [][]byte, a CallArgs) []byte {
	if c.releasesOne(len(keys), a) {
		nk := 1
		if a.Companion != "" {
			nk = 2
		}
		dst = resp.AppendArrayHeader(dst, 3+nk+3)
		dst = append(dst, evalsha[refReleaseOne]...)
		dst = resp.AppendBulkInt(dst, int64(nk))
		dst = resp.AppendBulk(dst, keys[0])
		if nk == 2 {
			dst = appendCompanions(dst, a.Companion, keys)
		}
		dst = resp.AppendBulkInt(dst, int64(c.Prefix))
		dst = resp.AppendBulkInt(dst, a.LowMs)
		return resp.AppendBulk(dst, argv[c.Tokens[0]])
	}
	ntok := 0
	if c.Tokens != nil {
		ntok = len(keys)
	}
	companions := a.Companion != "" && !c.Role.Query() && !a.ReadOnly && c.Shape != ShapeOwners
	nonce := companions && a.Nonce != "" && (c.SetsTTL() || c.Counted && (c.Role == RoleExtendOrAcquire || c.Role == RoleRelease))
	latch := a.Latch != nil && !a.ReadOnly && !c.Role.Query() && c.Shape != ShapeOwners
	nk := len(keys)
	if companions {
		nk *= 2
	}
	extra := 0
	if c.Shape != ShapeString {
		extra++ // the marker, or the hash's field value, after the tokens
	}
	if nonce {
		extra++
	}
	if latch {
		nk++
		extra++ // the latch's TTL, last
	}
	dst = resp.AppendArrayHeader(dst, 3+nk+8+ntok+extra)
	dst = append(dst, evalsha[c.ReferenceFor(len(keys), a)]...)
	dst = resp.AppendBulkInt(dst, int64(nk))
	for _, k := range keys {
		dst = resp.AppendBulk(dst, k)
	}
	if companions {
		dst = appendCompanions(dst, a.Companion, keys)
	}
	if latch {
		dst = resp.AppendBulk(dst, a.Latch)
	}
	maxv := int64(a.MaxValue)
	if maxv <= 0 {
		maxv = 1 << 10
	}
	capMs := a.CapMs
	// Numbers the script will not read go as 0 (one byte, no formatting).
	if !a.Detailed {
		maxv = 0
	}
	if !c.Additive {
		capMs = 0
	}
	detail := int64(0)
	if a.Detailed {
		detail = 1
	}
	flags := int64(0)
	if c.Additive {
		flags |= 1
	}
	if c.NoTTLActs {
		flags |= 2
	}
	if c.Promotes {
		flags |= 4
	}
	if c.Demotes {
		flags |= 8
	}
	if latch {
		flags |= 16
	}
	for _, n := range [...]int64{detail, int64(c.Prefix), a.LowMs, a.TTLms, flags, capMs, int64(len(keys)), maxv} {
		dst = resp.AppendBulkInt(dst, n)
	}
	for k := 0; k < ntok; k++ {
		t := c.Tokens[min(k, len(c.Tokens)-1)]
		dst = resp.AppendBulk(dst, argv[t])
	}
	if nonce {
		dst = resp.AppendBulkString(dst, a.Nonce)
	}
	switch c.Shape {
	case ShapeOwners:
		dst = resp.AppendBulkString(dst, c.Marker)
	case ShapeHash:
		dst = resp.AppendBulk(dst, c.FieldValueOf(argv))
	}
	if latch {
		dst = resp.AppendBulkInt(dst, a.LatchMs)
	}
	return dst
}

// appendCompanions encodes each key's companion as a bulk string: the
// prefix, the hash tag of the key's slot, then the key (keyslot.Companion),
// so that a companion shares its key's slot on a Redis Cluster.
func appendCompanions(dst []byte, prefix string, keys [][]byte) []byte {
	for _, k := range keys {
		dst = keyslot.BulkCompanion(dst, prefix, k)
	}
	return dst
}

// SetsTTL reports whether a call of the class's role sets a TTL as asked
// (not added) on a lock with a companion: an extend, or an
// extend-or-acquire, whose first step keeps a key longer than asked and
// whose second step then sets what was asked. A lock of several owners
// keeps each owner's deadline and is never shortened, and so does a
// reentrant lock (Counted): each hold re-arms it to the longer TTL.
func (c *Class) SetsTTL() bool {
	return !c.Additive && c.Tokens != nil && c.Shape != ShapeOwners && c.Role.Extends() && !c.Counted
}

// AppendSecondStep encodes EVALSHA of refSecondStep for a call whose first
// step was sent with a.Nonce: the TTL asked, on the keys that still hold
// the token and the nonce.
func (c *Class) AppendSecondStep(dst []byte, keys, argv [][]byte, a CallArgs) []byte {
	dst = resp.AppendArrayHeader(dst, 3+2*len(keys)+3+len(keys))
	dst = resp.AppendBulkString(dst, "EVALSHA")
	dst = resp.AppendBulkString(dst, RefSecondStep.Sha)
	dst = resp.AppendBulkInt(dst, int64(2*len(keys)))
	for _, k := range keys {
		dst = resp.AppendBulk(dst, k)
	}
	dst = appendCompanions(dst, a.Companion, keys)
	dst = resp.AppendBulkInt(dst, a.TTLms)
	dst = resp.AppendBulkString(dst, a.Nonce)
	dst = resp.AppendBulkInt(dst, int64(c.Prefix))
	for k := range keys {
		dst = resp.AppendBulk(dst, argv[c.Tokens[min(k, len(c.Tokens)-1)]])
	}
	return dst
}

// SecondStep is the script AppendSecondStep calls.
func SecondStep() *resp.Script { return RefSecondStep }

// referenceArgs is AppendReference's ARGV as strings (tests, oracle).
func (c *Class) ReferenceArgs(keys, argv []string, a CallArgs) []string {
	_, args := DecodeCall(c.AppendReference(nil, StrArgs(keys), StrArgs(argv), a))
	return args
}

// decodeCall splits an encoded EVALSHA call into its KEYS and ARGV (tests,
// oracle).
func DecodeCall(b []byte) (keys, args []string) {
	var elems []string
	for i := 0; i < len(b); {
		j := i + 1
		for b[j] != '\r' {
			j++
		}
		if b[i] == '*' {
			i = j + 2
			continue
		}
		l, _ := strconv.Atoi(string(b[i+1 : j]))
		elems = append(elems, string(b[j+2:j+2+l]))
		i = j + 2 + l + 2
	}
	nk, _ := strconv.Atoi(elems[2])
	return elems[3 : 3+nk], elems[3+nk:]
}

// IsReference reports whether sc is one of the reference scripts.
func IsReference(sc *resp.Script) bool {
	for _, r := range references {
		if sc == r {
			return true
		}
	}
	return false
}

// CountRepair is the script that sets a reentrant lock's count of holds to
// the majority's (see refCountRepair).
func CountRepair() *resp.Script { return refCountRepair }

// AppendCountRepair encodes EVALSHA of the repair of a reentrant lock's
// count for a call with these (split) keys and arguments: the lock, its
// companion, the token, the op's nonce and the count.
func (c *Class) AppendCountRepair(dst []byte, keys, argv [][]byte, companion, nonce string, count int64) []byte {
	dst = resp.AppendArrayHeader(dst, 8)
	dst = append(dst, evalsha[refCountRepair]...)
	dst = resp.AppendBulkInt(dst, 2)
	dst = resp.AppendBulk(dst, keys[0])
	dst = appendCompanions(dst, companion, keys[:1])
	dst = resp.AppendBulk(dst, argv[c.Tokens[0]])
	dst = resp.AppendBulkString(dst, nonce)
	return resp.AppendBulkInt(dst, count)
}

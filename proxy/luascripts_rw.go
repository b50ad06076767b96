package proxy

import "github.com/redlock-proxy/redlock-proxy/internal/base/resp"

// The scripts a read-write lock runs on the backends (kind_rw.go), in
// Redisson's layout: KEYS[1] a hash whose field "mode" is "read" or
// "write" and whose other fields count their holder's holds; each read
// hold i of holder h has a lease, the key lease(h, i), that lives for the
// hold's TTL (the hash lives at least as long as every lease in it); the
// key last(h) keeps "count:nonce" of h's last grant, for its undo. The
// rules each keeps, on each master: a read hold is added only where no
// other holder has the write lock, a write hold only where the lock is
// free or the caller's write lock; a release or an undo takes off only
// the caller's own holds; nothing is left without an expiry.

// rwHead reads the lock's state: its type and mode (false when the key is
// no read-write lock), and names the derived keys as Redisson does.
const rwHead = `local K = KEYS[1]
local P = K
if not string.find(K, '{', 1, true) then P = '{' .. K .. '}' end
local function lease(h, i) return P .. ':' .. h .. ':rwlock_timeout:' .. i end
local function last(h) return P .. ':' .. h .. ':rwlock_last' end
local ty = redis.call('type', K).ok
local mode = false
if ty == 'hash' then mode = redis.call('hget', K, 'mode') end
if mode ~= 'read' and mode ~= 'write' then mode = false end
`

// rwReadAcquireScript: KEYS[1] the lock; ARGV TTL ms, holder, the
// holder's writer name, nonce. Answers {1, holds after, PTTL before} where
// it took a hold, {0, 0, PTTL} where another holds the write lock (or the
// key is something else).
var rwReadAcquireScript = resp.NewScript([]byte(rwHead + `local ttl, h, w = tonumber(ARGV[1]), ARGV[2], ARGV[3]
if (ty == 'none') or mode == 'read' or (mode == 'write' and redis.call('hexists', K, w) == 1) then
  local pt = redis.call('pttl', K)
  if ty == 'none' then redis.call('hset', K, 'mode', 'read') end
  local n = redis.call('hincrby', K, h, 1)
  redis.call('set', lease(h, n), ARGV[4], 'px', ttl)
  redis.call('set', last(h), n .. ':' .. ARGV[4], 'px', ttl)
  redis.call('pexpire', K, math.max(pt, ttl))
  return {1, n, pt}
end
return {0, 0, redis.call('pttl', K)}`))

// rwWriteAcquireScript: KEYS[1] the lock; ARGV TTL ms, writer, nonce, the
// longest TTL (max_ttl). A free lock is taken for the TTL; the caller's
// write lock entered again lives the TTL longer (as Redisson adds it),
// refused where that passes the longest TTL. Answers as the read acquire.
var rwWriteAcquireScript = resp.NewScript([]byte(rwHead + `local ttl, w, cap = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[4])
local pt = redis.call('pttl', K)
local ms = -1
if ty == 'none' then
  ms = ttl
  redis.call('hset', K, 'mode', 'write')
elseif mode == 'write' and redis.call('hexists', K, w) == 1 then
  ms = math.max(pt, 0) + ttl
  if ms > cap then ms = -1 end
end
if ms < 0 then return {0, 0, pt} end
local n = redis.call('hincrby', K, w, 1)
redis.call('set', last(w), n .. ':' .. ARGV[3], 'px', ms)
redis.call('pexpire', K, ms)
return {1, n, pt}`))

// rwUndoScript: KEYS[1] the lock; ARGV holder, nonce, "w" for a write
// hold (else a read hold), and the place of the instant later undo forms
// carry (unused: the nonce tells this attempt's hold from any other). Takes off the holder's last hold only
// while the grant with that nonce is its last: the hold, its lease, and
// the lock where no holder is left.
var rwUndoScript = resp.NewScript([]byte(rwHead + `local h = ARGV[1]
if not mode then return 0 end
local n = tonumber(redis.call('hget', K, h))
if not n or redis.call('get', last(h)) ~= n .. ':' .. ARGV[2] then return 0 end
redis.call('del', last(h), lease(h, n))
if n > 1 then
  redis.call('hincrby', K, h, -1)
  return 1
end
redis.call('hdel', K, h)
if redis.call('hlen', K) <= 1 then
  redis.call('del', K)
elseif mode == 'write' and ARGV[3] == 'w' then
  redis.call('hset', K, 'mode', 'read')
end
return 1`))

// rwLatch answers a retried release from its latch (KEYS[2]): a latch
// this script wrote holds its answer; anything else reads as a call that
// did nothing. done records an answer that acted for the latch's TTL.
const rwLatch = `local L = KEYS[2]
local got = redis.call('get', L)
if got then
  if string.sub(got, 1, 3) == 'rw:' then return tonumber(string.sub(got, 4)) end
  return 0
end
local function done(code)
  redis.call('set', L, 'rw:' .. code, 'px', ARGV[#ARGV])
  return code
end
`

// rwReadReleaseScript: KEYS[1] the lock, KEYS[2] the latch; ARGV holder,
// latch TTL ms. Takes off the holder's last read hold and its lease.
// Answers 0 where the holder had none, 1 where the lock is still held
// (another hold with a lease left, or a write lock), 2 where it freed the
// lock (the last lease gone: the lock is deleted, as Redisson deletes it).
var rwReadReleaseScript = resp.NewScript([]byte(rwHead + rwLatch + `local h = ARGV[1]
if not mode then return 0 end
local n = tonumber(redis.call('hget', K, h))
if not n or n < 1 then return 0 end
redis.call('del', lease(h, n), last(h))
if n > 1 then redis.call('hincrby', K, h, -1) else redis.call('hdel', K, h) end
if redis.call('hlen', K) > 1 then
  -- A write lock stays (the caller's, held beside its reads); a read lock
  -- lives as long as its longest lease left, and goes with the last.
  if mode == 'write' then return done(1) end
  local left = -3
  for _, f in ipairs(redis.call('hkeys', K)) do
    local c = tonumber(redis.call('hget', K, f))
    if f ~= 'mode' and c then
      for i = c, 1, -1 do left = math.max(left, redis.call('pttl', lease(f, i))) end
    end
  end
  if left > 0 then
    redis.call('pexpire', K, left)
    return done(1)
  end
end
redis.call('del', K)
return done(2)`))

// rwWriteReleaseScript: KEYS[1] the lock, KEYS[2] the latch; ARGV writer,
// TTL ms (re-arms a lock whose holds are left, never shorter), latch TTL
// ms. Answers 0 where the caller held no write lock, 1 where write holds
// are left, 2 where it freed the lock (deleted), 3 where the caller's read
// holds are left (the lock turns to read, as in Redisson).
var rwWriteReleaseScript = resp.NewScript([]byte(rwHead + rwLatch + `local w, ttl = ARGV[1], tonumber(ARGV[2])
if mode ~= 'write' then return 0 end
local n = tonumber(redis.call('hget', K, w))
if not n or n < 1 then return 0 end
redis.call('del', last(w))
if n > 1 then
  redis.call('hincrby', K, w, -1)
  redis.call('pexpire', K, math.max(redis.call('pttl', K), ttl))
  return done(1)
end
redis.call('hdel', K, w)
if redis.call('hlen', K) <= 1 then
  redis.call('del', K)
  return done(2)
end
redis.call('hset', K, 'mode', 'read')
return done(3)`))

// rwReadRenewScript: KEYS[1] the lock; ARGV TTL ms, holder. Where the
// holder holds the lock, re-arms it and the holder's leases (never
// shorter) and answers 1; elsewhere 0.
var rwReadRenewScript = resp.NewScript([]byte(rwHead + `local ttl, h = tonumber(ARGV[1]), ARGV[2]
if not mode then return 0 end
local n = tonumber(redis.call('hget', K, h))
if not n or n < 1 then return 0 end
redis.call('pexpire', K, math.max(redis.call('pttl', K), ttl))
for i = n, 1, -1 do
  local pt = redis.call('pttl', lease(h, i))
  if pt > 0 then redis.call('pexpire', lease(h, i), math.max(pt, ttl)) end
end
return 1`))

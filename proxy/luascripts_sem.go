package proxy

import "github.com/redlock-proxy/redlock-proxy/internal/base/resp"

// The scripts a counting semaphore runs on the backends (kind_sem.go). A
// semaphore's permits live on each master in one hash beside its key
// (semPrefix, keyslot.Companion): a field per holder, its token, whose
// value is "slot:deadline:nonce", the deadline in ms on the master's clock
// and the nonce set only by the acquisition that took the slot (an undo
// removes the field only while that nonce is there: a later re-arm through
// any proxy clears it). A field whose deadline has passed is no holder and
// is removed by the next script that reads the hash. The hash expires with
// its last deadline. Each script keeps the rule that makes the semaphore
// safe: a slot is held by one token at a time on a master.

// semScan reads the permits in h at the master's clock (now), removing
// those whose deadline passed: the caller's (tok) slot and deadline (own,
// ownd), the slots below limit held (used) and how many (count), and the
// last deadline (top).
const semScan = `local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local all = redis.call('hgetall', h)
local used, own, ownd, count, top = {}, nil, 0, 0, 0
for i = 1, #all, 2 do
  local s, d = string.match(all[i + 1], '^(%d+):(%d+):')
  s, d = tonumber(s), tonumber(d)
  if not s or d <= now then
    redis.call('hdel', h, all[i])
  else
    if all[i] == tok then own, ownd = s, d end
    if s < limit then
      used[s] = true
      count = count + 1
    end
    if d > top then top = d end
  end
end`

// semAcquireScript: KEYS[1] the hash; ARGV token, TTL ms, limit, preferred
// slot, nonce. A caller that holds a slot there re-arms it while fewer than
// limit slots are held (counting its own), else is refused and keeps it;
// another takes the first free slot from the preferred one on. Returns
// {acted, slot held for the caller or -1, 1 took / 2 re-armed / 0, the
// slots below limit held after it, as a string of 0 and 1}.
var semAcquireScript = resp.NewScript([]byte(`local h, tok = KEYS[1], ARGV[1]
local ttl, limit, pref, nonce = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5]
` + semScan + semTake))

// semAcquireStoredScript is semAcquireScript for a semaphore whose limit
// the set-up stored on each master (KEYS[2], semSetLimitScript; ARGV[3]
// unused): a master that has none holds no slot for anyone.
var semAcquireStoredScript = resp.NewScript([]byte(`local h, tok = KEYS[1], ARGV[1]
local ttl, limit, pref, nonce = tonumber(ARGV[2]), tonumber(redis.call('get', KEYS[2]) or '0') or 0, tonumber(ARGV[4]), ARGV[5]
` + semScan + semTake))

// semTake is the acquire's step after semScan.
const semTake = `
local acted, slot, how = 0, -1, 0
if own then
  if count < limit then acted, slot, how = 1, own, 2 end
else
  for i = 0, limit - 1 do
    local s = (pref + i) % limit
    if not used[s] then
      acted, slot, how = 1, s, 1
      break
    end
  end
end
if acted == 1 then
  local d = math.max(ownd, now + ttl)
  local n = ''
  if how == 1 then n = nonce end
  redis.call('hset', h, tok, slot .. ':' .. d .. ':' .. n)
  if slot < limit then used[slot] = true end
  redis.call('pexpireat', h, math.max(top, d))
end
local bits = {}
for i = 0, limit - 1 do
  if used[i] then bits[i + 1] = '1' else bits[i + 1] = '0' end
end
return {acted, slot, how, table.concat(bits)}`

// semRefreshScript: KEYS[1] the hash; ARGV token, TTL ms. A caller that
// holds a slot there re-arms it (never shortening it) and the nonce is
// cleared. Returns {acted, slot or -1, 2 or 0, an empty string}.
var semRefreshScript = resp.NewScript([]byte(`local h, tok, ttl, limit = KEYS[1], ARGV[1], tonumber(ARGV[2]), 0
` + semScan + `
if not own then return {0, -1, 0, ''} end
local d = math.max(ownd, now + ttl)
redis.call('hset', h, tok, own .. ':' .. d .. ':')
redis.call('pexpireat', h, math.max(top, d))
return {1, own, 2, ''}`))

// semReleaseScript: KEYS[1] the hash; ARGV the tokens. Removes each token's
// permit; returns 1 or 0 for each.
var semReleaseScript = resp.NewScript([]byte(`local out = {}
for i, tok in ipairs(ARGV) do out[i] = redis.call('hdel', KEYS[1], tok) end
return out`))

// semUndoScript: KEYS[1] the hash; ARGV token, nonce, and a place for the
// instant later forms of other undos carry (unused: the nonce tells this
// attempt's slot from any later one). Removes the token's permit only if
// the attempt with that nonce took it and nothing re-armed it since.
var semUndoScript = resp.NewScript([]byte(`local v = redis.call('hget', KEYS[1], ARGV[1])
if v and string.sub(v, -#ARGV[2] - 1) == ':' .. ARGV[2] then return redis.call('hdel', KEYS[1], ARGV[1]) end
return 0`))

// semSetLimitScript: KEYS[1] the semaphore's stored limit; ARGV the
// limit. Sets it where there is none; returns {1 if it did, else 0; the
// limit stored after it}. The limit has no expiry, as the set-up it stands
// for (Redisson's trySetPermits) has none: it is the semaphore's size, not
// a permit.
var semSetLimitScript = resp.NewScript([]byte(`local v = redis.call('get', KEYS[1])
if v then return {0, v} end
redis.call('set', KEYS[1], ARGV[1])
return {1, ARGV[1]}`))

// semLimitRepairScript: KEYS[1] the semaphore's stored limit; ARGV the
// limit a set-up's answer showed there, and the one to leave instead (""
// for none). Changes it only while it is still the one shown; returns 1
// if it did, else 0.
var semLimitRepairScript = resp.NewScript([]byte(`if redis.call('get', KEYS[1]) ~= ARGV[1] then return 0 end
if ARGV[2] == '' then redis.call('del', KEYS[1]) else redis.call('set', KEYS[1], ARGV[2]) end
return 1`))

// semCountScript: KEYS[1] the hash, KEYS[2] the stored limit. Returns
// {the limit (0 if none), then each live permit's token and slot}.
var semCountScript = resp.NewScript([]byte(`local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local out = {tonumber(redis.call('get', KEYS[2]) or '0') or 0}
local all = redis.call('hgetall', KEYS[1])
for i = 1, #all, 2 do
  local s, d = string.match(all[i + 1], '^(%d+):(%d+):')
  if s and tonumber(d) > now then
    out[#out + 1] = all[i]
    out[#out + 1] = tonumber(s)
  end
end
return out`))

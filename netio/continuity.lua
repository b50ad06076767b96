-- The continuity check (see continuity.go). KEYS[1]: the marker. ARGV: [1]
-- master_replid, [2] the marker's epoch, [3] evicted_keys ('*': evictions
-- are no loss, see marker.lua), [4] the least
-- total_commands_processed, as the link's last marker check read them;
-- [5] this proxy's id, [6] the highest count of this proxy's checks it saw
-- answered in that epoch, [7] the longest TTL in ms among the commands
-- before it that set one (0: none), [8...] pairs of another proxy's id
-- and a count of its checks in that epoch that this proxy learned was
-- answered (book.go): a copy of the data from before a write of another
-- proxy keeps this proxy's count as it was, but not that one's.
-- It answers {the master's clock in ms, this proxy's new count, the
-- marker's count of clock steps back, the latest step's size in ms} when
-- the data went on unbroken since, and records the TTL's deadline; 0
-- otherwise.
--
-- It runs with every write of grants, so it is written for the masters'
-- CPU: INFO's fields are found by plain search (a pattern scans the
-- section from each of its bytes), the marker is read in one HMGET, and
-- Redis 7 and later give both sections in one INFO call (each call costs
-- about 5 us before its section; a Redis 6 master, whose scripts have no
-- redis.REDIS_VERSION_NUM, gets two). Every field searched for is in one
-- section only, so searching both at once finds the same ones.
local repl, stats
if redis.REDIS_VERSION_NUM then
  repl = redis.call('INFO', 'replication', 'stats')
  stats = repl
else
  repl = redis.call('INFO', 'replication')
end
if not string.find(repl, '\nrole:master\r', 1, true)
    or not string.find(repl, '\nmaster_replid:' .. ARGV[1] .. '\r', 1, true) then
  return 0
end
-- Every check moves this proxy's count on (a field only this proxy
-- writes, so no other proxy's checks can hide what this one saw): a copy
-- of the data from before a check it saw answered has a lower one.
local f = 'c:' .. ARGV[5]
local fields = {'epoch', f, 'until', 'clk', 'back', 'backms', 'hi', 'lo', 'behind'}
for i = 8, #ARGV - 1, 2 do fields[#fields + 1] = 'c:' .. ARGV[i] end
local m = redis.call('HMGET', KEYS[1], unpack(fields))
if m[1] ~= ARGV[2] or (tonumber(m[2]) or 0) < tonumber(ARGV[6]) then return 0 end
for i = 8, #ARGV - 1, 2 do
  if (tonumber(m[10 + (i - 8) / 2]) or 0) < tonumber(ARGV[i + 1]) then return 0 end
end
stats = stats or redis.call('INFO', 'stats')
-- A server whose INFO has no evicted_keys was read as 0 evictions.
if ARGV[3] ~= '*' and not string.find(stats, '\nevicted_keys:' .. ARGV[3] .. '\r', 1, true)
    and (ARGV[3] ~= '0' or string.find(stats, '\nevicted_keys:', 1, true)) then
  return 0
end
local _, e = string.find(stats, '\ntotal_commands_processed:', 1, true)
if (tonumber(e and string.match(stats, '^%d+', e + 1)) or 0) < tonumber(ARGV[4]) then return 0 end
local seq = (tonumber(m[2]) or 0) + 1
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
-- The master's clock readings and its steps back (clockstep.lua): a
-- proxy that read it neither back nor forward again would see no jump in
-- its own readings; the count tells it (clock.go).
local back, backms, _, set, ended = clockStep(now, tonumber(m[4]), tonumber(m[7]), tonumber(m[8]),
  tonumber(m[5]) or 0, tonumber(m[6]) or 0, tonumber(m[9]) or 0)
local w = {'HSET', KEYS[1], f, seq, 'clk', now}
for i = 1, #set do w[#w + 1] = set[i] end
-- The record of the latest deadline is written half a second beyond the
-- grant's, so that the checks of the next half second (every write at a
-- steady load) find it covered and write nothing more: a lost master's
-- hold then ends at most that much later than its last lock.
local ttl = tonumber(ARGV[7])
if ttl > 0 and now + ttl > (tonumber(m[3]) or 0) then
  w[#w + 1], w[#w + 2] = 'until', now + ttl + 500
end
redis.call(unpack(w))
if ended then redis.call('HDEL', KEYS[1], 'hi', 'lo') end
return {now, seq, back, backms}

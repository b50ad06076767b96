-- The continuity check (see continuity.go). KEYS[1]: the marker. ARGV: [1]
-- master_replid, [2] the marker's epoch, [3] evicted_keys ('*': evictions
-- are no loss, see marker.lua), [4] the least
-- total_commands_processed, as the link's last marker check read them;
-- [5] this proxy's id, [6] the highest count of this proxy's checks it saw
-- answered in that epoch, [7] the longest TTL in ms among the commands
-- before it that set one (0: none).
-- It answers {the master's clock in ms, this proxy's new count} when
-- the data went on unbroken since, and records the TTL's deadline; 0
-- otherwise.
local repl = redis.call('INFO', 'replication')
if string.match(repl, 'role:([^\r\n]*)') ~= 'master' or string.match(repl, 'master_replid:([^\r\n]*)') ~= ARGV[1] then return 0 end
if redis.call('HGET', KEYS[1], 'epoch') ~= ARGV[2] then return 0 end
local stats = redis.call('INFO', 'stats')
if ARGV[3] ~= '*' and (string.match(stats, 'evicted_keys:([^\r\n]*)') or '0') ~= ARGV[3] then return 0 end
if (tonumber(string.match(stats, 'total_commands_processed:([^\r\n]*)')) or 0) < tonumber(ARGV[4]) then return 0 end
-- Every check moves this proxy's count on (a field only this proxy
-- writes, so no other proxy's checks can hide what this one saw): a copy
-- of the data from before a check it saw answered has a lower one.
local f = 'c:' .. ARGV[5]
if (tonumber(redis.call('HGET', KEYS[1], f)) or 0) < tonumber(ARGV[6]) then return 0 end
local seq = redis.call('HINCRBY', KEYS[1], f, 1)
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[7])
if ttl > 0 then
  local u = tonumber(redis.call('HGET', KEYS[1], 'until')) or 0
  if now + ttl > u then redis.call('HSET', KEYS[1], 'until', now + ttl) end
end
return {now, seq}

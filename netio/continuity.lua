-- The continuity check (see continuity.go). KEYS[1]: the marker. ARGV: [1]
-- master_replid, [2] the marker's epoch, [3] evicted_keys ('*': evictions
-- are no loss, see marker.lua), [4] the least
-- total_commands_processed, as the link's last marker check read them;
-- [5] the highest sequence the link knows for that epoch; [6] the longest
-- TTL in ms among the commands before it that set one (0: none).
-- It answers {the master's clock in ms, the marker's new sequence} when
-- the data went on unbroken since, and records the TTL's deadline; 0
-- otherwise.
local repl = redis.call('INFO', 'replication')
if string.match(repl, 'role:([^\r\n]*)') ~= 'master' or string.match(repl, 'master_replid:([^\r\n]*)') ~= ARGV[1] then return 0 end
if redis.call('HGET', KEYS[1], 'epoch') ~= ARGV[2] then return 0 end
local stats = redis.call('INFO', 'stats')
if ARGV[3] ~= '*' and (string.match(stats, 'evicted_keys:([^\r\n]*)') or '0') ~= ARGV[3] then return 0 end
if (tonumber(string.match(stats, 'total_commands_processed:([^\r\n]*)')) or 0) < tonumber(ARGV[4]) then return 0 end
-- Every check moves the sequence on: a copy of the data from before a
-- check the link saw has a lower one.
local seq = redis.call('HINCRBY', KEYS[1], 'seq', 1)
if seq <= tonumber(ARGV[5]) then return 0 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[6])
if ttl > 0 then
  local u = tonumber(redis.call('HGET', KEYS[1], 'until')) or 0
  if now + ttl > u then redis.call('HSET', KEYS[1], 'until', now + ttl) end
end
return {now, seq}

-- Vouching for a brand-new master (see vouch.go). KEYS[1]: its marker.
-- ARGV: [1] 'check' or 'write', [2] the hold in ms, [3] '1' on a Redis
-- Cluster node, [4] the config epoch a Sentinel group's master is checked
-- under ('' otherwise), [5] under 'write', what the check saw. It answers
-- {1, '', what it saw} when the master may be vouched for (and under
-- 'write', was), or {0, why not}. What it saw is the run and the marker's
-- epoch: a write finds both as the check left them, or refuses, since a
-- master restarted empty since the check (its grants and their record
-- lost with it) would pass every other test again.
local repl = redis.call('INFO', 'replication')
if string.match(repl, 'role:([^\r\n]*)') ~= 'master' then return {0, 'it is not a master'} end
local marked = redis.call('EXISTS', KEYS[1])
local keys = redis.call('DBSIZE') - marked
if keys > 0 then return {0, 'it holds ' .. keys .. ' keys'} end
if marked == 1 then
  local m = redis.call('HMGET', KEYS[1], 'why', 'until')
  local used = (tonumber(m[2]) or 0) > 0 or (m[1] ~= 'new' and m[1] ~= 'vouched')
  local all = redis.call('HGETALL', KEYS[1])
  for i = 1, #all, 2 do
    if string.sub(all[i], 1, 2) == 'c:' then used = true end
  end
  if used then
    return {0, 'its replication marker shows it was used (' .. (m[1] or '') .. ')'}
  end
end
local server = redis.call('INFO', 'server')
local runid = string.match(server, 'run_id:([^\r\n]*)') or ''
local seen = runid .. '|' .. (redis.call('HGET', KEYS[1], 'epoch') or '')
if ARGV[1] ~= 'write' then return {1, '', seen} end
if seen ~= ARGV[5] then
  return {0, 'it restarted or its marker changed since VOUCH checked it (' .. ARGV[5] .. ', now ' .. seen .. ')'}
end
local stats = redis.call('INFO', 'stats')
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local long = now - tonumber(ARGV[2]) - 1000
local epoch = runid .. ':' .. t[1] .. '.' .. t[2]
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'replid', string.match(repl, 'master_replid:([^\r\n]*)') or '', 'lost', long, 'run', runid,
  'started', long, 'hold', ARGV[2], 'evicted', string.match(stats, 'evicted_keys:([^\r\n]*)') or '0', 'epoch', epoch,
  'why', 'vouched', 'until', 0, 'whole', epoch, 'settle', 0)
if ARGV[3] == '1' then redis.call('HSET', KEYS[1], 'node', redis.call('CLUSTER', 'MYID')) end
if ARGV[4] ~= '' then redis.call('HSET', KEYS[1], 'sepoch', ARGV[4]) end
return {1, '', seen}

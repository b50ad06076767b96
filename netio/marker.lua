-- The replication marker (see identity.go for what each loss means).
-- KEYS[1]: the marker. ARGV: [1] the proxy's hold in ms, [2] the commands
-- processed at the link's last check, [3] the run_id that count was read
-- in, [4] '1' on a Redis Cluster node, [5] a loss the link saw itself, to
-- record now with that reason ('' when none), [6] the proxy's settle time
-- in ms, [7] a restore of the record, 'EPOCH MS' ('' when none), [8] '1'
-- when evictions are no loss (the upgrade's old Redis, whose clients had
-- that risk before), [9] the group's config epoch its Sentinels confirm,
-- for the master of a Sentinel-managed group ('' otherwise), followed by
-- ' switched MS' when the proxy saw a switch MS ago that no check of this
-- master it made since has covered, [10...] what
-- the proxy knows of
-- other markers' epochs: pairs of 'EPOCH|PROXY' and the highest count of
-- that proxy's checks seen, or of 'EPOCH' and 'R' (retired).
local function field(info, name)
  return string.match(info, name .. ':([^\r\n]*)')
end
local repl = redis.call('INFO', 'replication')
local server = redis.call('INFO', 'server')
local stats = redis.call('INFO', 'stats')
local memory = redis.call('INFO', 'memory')
local role = field(repl, 'role') or ''
local runid = field(server, 'run_id') or ''
local uptime = tonumber(field(server, 'uptime_in_seconds')) or 0
local replid = field(repl, 'master_replid') or ''
local evicted = field(stats, 'evicted_keys') or '0'
local cmds = tonumber(field(stats, 'total_commands_processed')) or 0
local evicts = ''
if (tonumber(field(memory, 'maxmemory')) or 0) > 0 and field(memory, 'maxmemory_policy') ~= 'noeviction' then
  evicts = field(memory, 'maxmemory_policy') or '?'
end
if role ~= 'master' then
  return {role, '', 0, 0, 0, runid, uptime, evicts, '', replid, evicted, cmds, 0, 0, '', 0, {}, 0, 0, 0, {}, 0, 0, 0}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local replid2 = field(repl, 'master_replid2') or ''
local m = redis.call('HMGET', KEYS[1], 'replid', 'lost', 'run', 'started', 'hold', 'evicted', 'epoch', 'why', 'node',
  'until', 'whole', 'settle', 'sepoch', 'clk', 'back', 'backms', 'hi', 'lo', 'behind')
local node = ''
if ARGV[4] == '1' then node = redis.call('CLUSTER', 'MYID') end
local hold = math.max(tonumber(m[5]) or 0, tonumber(ARGV[1]) or 0)
local settle = math.max(tonumber(m[12]) or 0, tonumber(ARGV[6]) or 0)
local started = tonumber(m[4])
if m[3] ~= runid or not started then
  started = math.min(now, now - uptime * 1000 + 1000)
end
local change, lost = '', tonumber(m[2]) or now
local function loss(why, at)
  if change == '' then change = why end
  -- A loss recorded later than now was recorded by a clock that was ahead
  -- then (it has gone back since): it was no later than now in fact, and
  -- must not hide this one.
  lost = math.max(math.min(lost, now), at)
end
if ARGV[5] ~= '' then
  loss(ARGV[5], now)
end
if not m[1] then
  loss('new', now)
elseif m[1] ~= replid then
  if not string.match(replid2, '^0+$') then
    -- A promotion since the marker was written.
    if m[1] == replid2 then loss('promoted', now) else loss('resynced', now) end
  elseif m[3] ~= runid then
    loss('restarted', now)
  end
  -- Otherwise the same run, never promoted: a master changes its
  -- replication id when its first replica attaches or its backlog is
  -- freed, with its data as it was.
elseif m[3] ~= runid then
  loss('restarted', now)
end
-- A restart is dated when it is seen, not at the run's start: the marker
-- of another run may have come in long after this one started (a standby
-- that has run for hours takes the address with a copy of the data).
if ARGV[3] ~= '' and ARGV[3] ~= runid and change == '' then
  loss('replaced', now)
end
if m[1] and (m[9] or '') ~= node and change == '' then
  loss('foreign', now)
end
-- A Sentinel group's master checked under a newer config epoch than the
-- marker last was: a failover since, whatever the master says of itself.
-- So is a switch the proxy saw itself, MS ago (' switched MS' after the
-- epoch), whatever the epochs say (Sentinels that forgot the group name
-- it under epoch 0 again), unless a loss was recorded here since.
local sepoch = tonumber(m[13])
if ARGV[9] ~= '' then
  local e = tonumber(string.match(ARGV[9], '^%d+'))
  local ago = tonumber(string.match(ARGV[9], ' switched (%d+)$'))
  if not sepoch or sepoch < e or (ago and (tonumber(m[2]) or 0) < now - ago) then
    if m[1] then loss('switched', now) end
  end
  if not sepoch or sepoch < e then sepoch = e end
end

if evicts ~= '' and ARGV[8] ~= '1' then
  loss('evicting', now)
elseif m[6] and m[3] == runid and m[6] ~= evicted and ARGV[8] ~= '1' then
  loss('evicted', now)
elseif ARGV[3] == runid and cmds < (tonumber(ARGV[2]) or 0) then
  loss('reset', now)
end
local epoch, why, whole = m[7], m[8] or '', m[11] or ''
local fresh = false
if change ~= '' or not epoch then
  -- A new epoch: its run and the instant make it unique. Its record of
  -- deadlines is not whole: it may lack grants counted before the loss.
  epoch, why, fresh = runid .. ':' .. t[1] .. '.' .. t[2], change, true
end
local untilms = tonumber(m[10]) or 0
-- The record is whole again once every lock it may have lacked has
-- expired: the hold passed since the loss and since the run's start, or a
-- proxy restored it from the other masters' records.
if whole ~= epoch and now - math.max(lost, started) >= hold then
  whole = epoch
end
if ARGV[7] ~= '' then
  local e, ms = string.match(ARGV[7], '^(%S+) (%d+)$')
  if e == epoch then
    untilms = math.max(untilms, now + tonumber(ms))
    whole = epoch
  end
end
if change ~= '' or m[1] ~= replid or m[3] ~= runid or tonumber(m[4]) ~= started or tonumber(m[5]) ~= hold or m[6] ~= evicted
    or m[7] ~= epoch or (m[9] or '') ~= node or (m[11] or '') ~= whole or tonumber(m[10] or 0) ~= untilms
    or tonumber(m[12]) ~= settle or tonumber(m[13]) ~= sepoch then
  redis.call('HSET', KEYS[1], 'replid', replid, 'lost', lost, 'run', runid, 'started', started, 'hold', hold,
    'evicted', evicted, 'epoch', epoch, 'why', why, 'until', untilms, 'whole', whole, 'settle', settle)
  if node ~= '' then redis.call('HSET', KEYS[1], 'node', node) end
  if sepoch then redis.call('HSET', KEYS[1], 'sepoch', sepoch) end
end
-- The master's clock readings and its steps back, kept as the continuity
-- check keeps them (clockstep.lua): written at every marker check too, so
-- that a step back is counted though no grant came since the last
-- reading. A master that refuses writes (out of memory, too few replicas)
-- still answers its marker check: the reading is then not kept.
local back, backms, behind, set, ended = clockStep(now, tonumber(m[14]), tonumber(m[17]), tonumber(m[18]),
  tonumber(m[15]) or 0, tonumber(m[16]) or 0, tonumber(m[19]) or 0)
redis.pcall('HSET', KEYS[1], 'clk', now, unpack(set))
if ended then redis.pcall('HDEL', KEYS[1], 'hi', 'lo') end
-- Each proxy's count of its continuity checks in this epoch ('c:PROXY'),
-- and what proxies told this master of the other markers' epochs
-- ('s:EPOCH|PROXY', the highest count seen, or 's:EPOCH', 'R'): a proxy
-- which never saw a newer copy of a master's data can tell an older one.
for i = 10, #ARGV - 1, 2 do
  local f = 's:' .. ARGV[i]
  local v = ARGV[i + 1]
  if v == 'R' then
    redis.call('HSET', KEYS[1], f, 'R')
  else
    local old = redis.call('HGET', KEYS[1], f)
    if (tonumber(old) or -1) < tonumber(v) then
      redis.call('HSET', KEYS[1], f, v)
    end
  end
end
local all = redis.call('HGETALL', KEYS[1])
local counts, seen, told = {}, {}, 0
for i = 1, #all, 2 do
  local p = string.sub(all[i], 1, 2)
  if p == 'c:' then
    if fresh then
      redis.call('HDEL', KEYS[1], all[i])
    else
      counts[#counts + 1] = string.sub(all[i], 3)
      counts[#counts + 1] = all[i + 1]
    end
  elseif p == 's:' then
    seen[#seen + 1] = string.sub(all[i], 3)
    seen[#seen + 1] = all[i + 1]
  end
end
if #seen > 512 then
  -- Keep what this proxy told it: the rest go, all at once.
  local keep = {}
  for i = 10, #ARGV - 1, 2 do keep['s:' .. ARGV[i]] = true end
  for i = 1, #seen, 2 do
    if not keep['s:' .. seen[i]] then redis.call('HDEL', KEYS[1], 's:' .. seen[i]) end
  end
end
local isWhole = 0
if whole == epoch then isWhole = 1 end
return {role, change, now - lost, now - started, hold, runid, uptime, evicts, epoch, replid, evicted, cmds, lost, started,
  why, now, counts, untilms - now, isWhole, settle, seen, back, backms, behind}

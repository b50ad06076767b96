package proxy

import "github.com/redlock-proxy/redlock-proxy/internal/resp"

// Scripts the proxy itself runs on the backends.
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
	// a read never brings back more than a lock token.
	readScript = resp.NewScript([]byte(`if redis.call('strlen', KEYS[1]) > tonumber(ARGV[1]) then
  return redis.error_reply('TOOLONG the value is longer than max_token')
end
return {redis.call('get', KEYS[1]), redis.call('pttl', KEYS[1])}`))
	// delScript is DEL of a lock key (KEYS[1]) that also deletes its FENCE
	// state (KEYS[2]); it answers as DEL of the lock key.
	delScript = resp.NewScript([]byte(`local n = redis.call('del', KEYS[1])
redis.call('del', KEYS[2])
return n`))
	// getScript is GET bounded like readScript.
	getScript = resp.NewScript([]byte(`if redis.call('strlen', KEYS[1]) > tonumber(ARGV[1]) then
  return redis.error_reply('TOOLONG the value is longer than max_token')
end
return redis.call('get', KEYS[1])`))
)

package libscripts

import (
	"encoding/json"
	"fmt"
	"os/exec"
)

// Semaphore scripts in the project's own words, with the behaviour of
// redis-semaphore's Semaphore: a sorted set of holders scored with when
// they joined, ARGV limit, token, TTL in ms and the caller's clock in ms.
const (
	SemaphoreAcquire = `local set, cap, me, ms, t = KEYS[1], tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
redis.call('zremrangebyscore', set, 0, t - ms)
if redis.call('zcard', set) >= cap then return 0 end
redis.call('zadd', set, t, me)
redis.call('pexpire', set, ms)
return 1`
	SemaphoreRefresh = `local t = tonumber(ARGV[4])
redis.call('zremrangebyscore', KEYS[1], 0, t - tonumber(ARGV[3]))
if not redis.call('zscore', KEYS[1], ARGV[2]) then return 0 end
redis.call('zadd', KEYS[1], t, ARGV[2])
redis.call('pexpire', KEYS[1], ARGV[3])
return 1`
)

// nodeSemaphoreDump prints redis-semaphore's Semaphore scripts as JSON.
const nodeSemaphoreDump = `const fs = require("fs");
const bt = String.fromCharCode(96);
const out = {};
for (const op of ["acquire", "refresh"]) {
  const src = fs.readFileSync("node_modules/redis-semaphore/lib/semaphore/" + op + "/lua.js", "utf8");
  const s = src.indexOf("createEval)(" + bt) + 13;
  out[op] = src.slice(s, src.indexOf(bt, s));
}
console.log(JSON.stringify(out));`

// NodeSemaphore returns the acquire and refresh scripts of redis-semaphore's
// Semaphore from the npm packages in nodeDir (run npm ci there first), by
// operation name, read by Node.js.
func NodeSemaphore(nodeDir string) (map[string]string, error) {
	cmd := exec.Command("node", "-e", nodeSemaphoreDump)
	cmd.Dir = nodeDir
	b, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("libscripts: reading redis-semaphore's Semaphore scripts in %s (npm ci there first): %w", nodeDir, err)
	}
	out := map[string]string{}
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, fmt.Errorf("libscripts: node output: %w", err)
	}
	for _, op := range []string{"acquire", "refresh"} {
		if out[op] == "" {
			return nil, fmt.Errorf("libscripts: no Semaphore %s script in redis-semaphore", op)
		}
	}
	return out, nil
}

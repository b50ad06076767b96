package libscripts

import (
	"encoding/json"
	"fmt"
	"os/exec"
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

package integration

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// The masters the tests start are the Redis they are meant to be: with
// REDIS_SERVER_VERSION set (./test.sh sets it where it runs tests over an
// older Redis, through REDIS_SERVER), their version must start with it.
func TestRedisServerVersion(t *testing.T) {
	s := startRedis(t, 1)[0]
	c := redis.NewClient(&redis.Options{Addr: s.Addr})
	defer c.Close()
	info, err := c.Info(context.Background(), "server").Result()
	if err != nil {
		t.Fatal(err)
	}
	var version string
	for _, l := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "redis_version:"); ok {
			version = v
		}
	}
	t.Logf("redis-server %s", version)
	if want := os.Getenv("REDIS_SERVER_VERSION"); want != "" && !strings.HasPrefix(version, want) {
		t.Fatalf("the masters run Redis %q; want %s*", version, want)
	}
	if version == "" {
		t.Fatal("INFO server has no redis_version")
	}
}

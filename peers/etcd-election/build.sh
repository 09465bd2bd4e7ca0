#!/usr/bin/env bash
# Builds the etcd-election peer: a static binary (CGO_ENABLED=0) and a
# FROM scratch image of it, tagged shardtest-etcd-election:latest or the
# first argument. Works from any working directory; needs Go (and the Go
# module proxy, for a first build) and a Docker Engine, nothing else.
#   peers/etcd-election/build.sh [TAG]
set -euo pipefail
tag="${1:-shardtest-etcd-election:latest}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ctx="$(mktemp -d)"
trap 'rm -rf "$ctx"' EXIT
(cd "$here" && CGO_ENABLED=0 go build -trimpath -o "$ctx/etcd-election-peer" .)
cp "$here/Dockerfile" "$ctx/Dockerfile"
docker build -q -t "$tag" "$ctx"
echo "built $tag"

#!/usr/bin/env bash
# Prints the folder holding kube-apiserver and etcd built from test/apiserver (a Go module of
# its own), building them on first use. They are cached in the git-ignored .cache/e2e/,
# keyed by the hash of test/apiserver/go.sum: a version bump rebuilds, nothing else does.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
mod=$repo/test/apiserver
key=$(sha256sum "$mod/go.sum" | cut -c1-16)
out=$repo/.cache/e2e/bin-$key
if [[ -x $out/kube-apiserver && -x $out/etcd ]]; then
  echo "e2e: kube-apiserver and etcd from cache $out" >&2
  echo "$out"
  exit 0
fi
echo "e2e: building kube-apiserver and etcd (go.sum $key; takes minutes the first time)" >&2
tmp=$(mktemp -d "$repo/.cache/e2e/build.XXXXXX" 2>/dev/null || { mkdir -p "$repo/.cache/e2e" && mktemp -d "$repo/.cache/e2e/build.XXXXXX"; })
trap 'rm -rf "$tmp"' EXIT
start=$SECONDS
(cd "$mod" && GOWORK=off CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$tmp/etcd" ./cmd/etcd)
(cd "$mod" && GOWORK=off CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$tmp/kube-apiserver" ./cmd/kube-apiserver)
rm -rf "$out"
mv "$tmp" "$out"
trap - EXIT
echo "e2e: built in $((SECONDS - start))s" >&2
echo "$out"

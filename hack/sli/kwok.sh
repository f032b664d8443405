#!/usr/bin/env bash
# Prints the path of the kwok binary that runs make sli's fake nodes (docs/sli.md), building
# it on first use from sigs.k8s.io/kwok at the version test/kwok/go.mod pins. Cached in the
# git-ignored .cache/sli/kwok-<key>, the key being the hash of that go.mod and go.sum and this
# script. The build runs under nice -n 19.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
mod=$repo/test/kwok
export GOWORK=off
key=$(cat "$mod/go.mod" "$mod/go.sum" "${BASH_SOURCE[0]}" | sha256sum | cut -c1-16)
out=$repo/.cache/sli/kwok-$key
if [[ -x $out/kwok ]]; then
  echo "sli: kwok from cache $out" >&2
  echo "$out/kwok"
  exit 0
fi
mkdir -p "$repo/.cache/sli"
tmp=$(mktemp -d "$repo/.cache/sli/build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
start=$SECONDS
version=$(cd "$mod" && go list -m -f '{{.Version}}' sigs.k8s.io/kwok)
(cd "$mod" && CGO_ENABLED=0 nice -n 19 go build -trimpath -ldflags "-s -w" -o "$tmp/kwok" sigs.k8s.io/kwok/cmd/kwok) ||
  { echo "sli: building kwok $version failed" >&2; exit 1; }
rm -rf "$out"
mv "$tmp" "$out"
echo "sli: kwok $version built in $((SECONDS - start))s" >&2
echo "$out/kwok"

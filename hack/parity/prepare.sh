#!/usr/bin/env bash
# guest-prepare for test/parity/parity.sh: puts kube-proxy v1.37's IPVS proxier
# (test/apiserver/cmd/kube-proxy-ipvs, built from k8s.io/kubernetes in the test/apiserver
# module, never the product's go.mod) into the folder $1, which the guest sees as
# /payload/prepared. The binary is cached in the git-ignored .cache/parity/, keyed by
# test/apiserver/go.sum and the command's sources: minutes the first time, reused after.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
dest=${1:?usage: prepare.sh DIR}
mod=$repo/test/apiserver
key=$(cat "$mod/go.sum" "$mod"/cmd/kube-proxy-ipvs/*.go | sha256sum | cut -c1-16)
out=$repo/.cache/parity/bin-$key
if [[ ! -x $out/kube-proxy-ipvs ]]; then
  echo "parity: building kube-proxy's IPVS proxier (key $key; takes minutes the first time)" >&2
  start=$SECONDS
  mkdir -p "$out.tmp"
  (cd "$mod" && GOWORK=off CGO_ENABLED=0 nice -n 10 go build -trimpath -ldflags "-s -w" \
    -o "$out.tmp/kube-proxy-ipvs" ./cmd/kube-proxy-ipvs)
  rm -rf "$out" && mv "$out.tmp" "$out"
  echo "parity: built in $((SECONDS - start))s" >&2
else
  echo "parity: kube-proxy-ipvs from cache $out" >&2
fi
cp "$out/kube-proxy-ipvs" "$dest/"
# The comparison tool is the product module's own (small, always rebuilt).
(cd "$repo" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$dest/paritydiff" ./test/parity/paritydiff)

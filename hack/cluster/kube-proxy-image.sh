#!/usr/bin/env bash
# kube-proxy-image.sh BINDIR: prints the folder holding kube-proxy-amd64.tar, the `docker load`
# archive of registry.k8s.io/kube-proxy:vX (X: the Kubernetes version of test/apiserver), for
# make conformance PROXY=kube-proxy. The image is upstream's recipe without a registry:
# BINDIR/kube-proxy (hack/cluster/binaries.sh) as /usr/local/bin/kube-proxy on a root file
# system made by hack/image/rootfs.sh from hack/cluster/kube-proxy/packages.txt (upstream's
# distroless-iptables holds the same tools). Cached in .cache/cluster/kube-proxy-image-<key>,
# the key hashing the binary, hack/image's sources, the package list and this script.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
bin=${1:?usage: kube-proxy-image.sh BINDIR}
export PATH=$PATH:/usr/local/go/bin GOWORK=off
kv=$(cd "$repo/test/apiserver" && go list -m -f '{{.Version}}' k8s.io/kubernetes)
ref=registry.k8s.io/kube-proxy:$kv
packages=$here/kube-proxy/packages.txt

key=$(cat "$bin/kube-proxy" "$repo"/hack/image/*.go "$repo"/hack/image/*.sh "$repo/hack/image/go.sum" \
  "$packages" "${BASH_SOURCE[0]}" | sha256sum | cut -c1-16)
out=$repo/.cache/cluster/kube-proxy-image-$key
if [[ -f $out/kube-proxy-amd64.tar ]]; then
  echo "cluster: kube-proxy image from cache $out" >&2
  echo "$out"
  exit 0
fi
start=$SECONDS
work=$(mktemp -d "${TMPDIR:-/tmp}/kipvs-kube-proxy-image.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/root" "$work/out"
IMAGE_PACKAGES=$packages nice -n 19 "$repo/hack/image/rootfs.sh" amd64 "$work/root"
install -m 0755 "$bin/kube-proxy" "$work/root/usr/local/bin/kube-proxy"
(cd "$repo/hack/image" && go build -trimpath -o "$work/image" .)
nice -n 19 "$work/image" build --root "linux/amd64=$work/root" --name "${ref%:*}" --version "$kv" \
  --revision "$(git -C "$repo" rev-parse HEAD)" --created "$(git -C "$repo" log -1 --format=%ct HEAD)" \
  --entrypoint /usr/local/bin/kube-proxy --created-by "hack/cluster/kube-proxy-image.sh ($ref)" \
  --out "$work/out" >&2
mkdir -p "$out.tmp"
mv "$work"/out/*.tar "$out.tmp/kube-proxy-amd64.tar"
rm -rf "$out" && mv "$out.tmp" "$out"
# Older builds are dead weight.
find "$repo/.cache/cluster" -maxdepth 1 -name 'kube-proxy-image-*' ! -path "$out" -exec rm -rf {} +
echo "cluster: kube-proxy image $ref built in $((SECONDS - start))s in $out" >&2
echo "$out"

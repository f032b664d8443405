#!/usr/bin/env bash
# images.sh BINDIR: prints the folder holding the cluster's container images as `docker load`
# archives (linux/amd64), which the node imports with `ctr -n k8s.io images import`; no
# registry is involved, so each is tagged with the name pods and containerd ask for:
#   pause-amd64.tar       registry.k8s.io/pause:3.10.1   BINDIR/pause (our Go pause)
#   kipvs-echo-amd64.tar  kube-ipvs/kipvs-echo:cluster   cmd/kipvs-echo (the smoke pod)
# Built with hack/image's Go tool (the code of `make image`), each from a root file system
# holding only its static binary. Cached in .cache/cluster/images-<key>, the key hashing the
# binaries, hack/image's sources and this script.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
bin=${1:?usage: images.sh BINDIR}
export PATH=$PATH:/usr/local/go/bin GOWORK=off

# The names the cluster uses: containerd's sandbox image (its config pins it) and the smoke
# pod's image.
pause_ref=registry.k8s.io/pause:3.10.1
echo_ref=kube-ipvs/kipvs-echo:cluster

work=$(mktemp -d "${TMPDIR:-/tmp}/kipvs-images.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/echo/usr/local/bin" "$work/pause"
(cd "$repo" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$work/echo/usr/local/bin/kipvs-echo" ./cmd/kipvs-echo)
cp "$bin/pause" "$work/pause/pause"

key=$(cat "$work/echo/usr/local/bin/kipvs-echo" "$work/pause/pause" "$repo"/hack/image/*.go \
  "$repo/hack/image/go.sum" "${BASH_SOURCE[0]}" | sha256sum | cut -c1-16)
out=$repo/.cache/cluster/images-$key
if [[ -f $out/pause-amd64.tar && -f $out/kipvs-echo-amd64.tar ]]; then
  echo "cluster: images from cache $out" >&2
  echo "$out"
  exit 0
fi

start=$SECONDS
(cd "$repo/hack/image" && go build -trimpath -o "$work/image" .)
revision=$(git -C "$repo" rev-parse HEAD)
created=$(git -C "$repo" log -1 --format=%ct HEAD)
tmp=$work/out
# image NAME:TAG ROOT ENTRYPOINT [CMD]
image() {
  local ref=$1 root=$2 ep=$3 cmd=${4:-}
  mkdir -p "$tmp/${ref//[\/:]/_}"
  "$work/image" build --root "linux/amd64=$root" --name "${ref%:*}" --version "${ref##*:}" \
    --revision "$revision" --created "$created" --entrypoint "$ep" --cmd "$cmd" \
    --created-by "hack/cluster/images.sh ($ref)" --out "$tmp/${ref//[\/:]/_}" >&2
  mv "$tmp/${ref//[\/:]/_}"/*.tar "$tmp/"
}
image "$pause_ref" "$work/pause" /pause
# The smoke pod's server: its name and the client's address over HTTP on 8080 and TCP on 9000.
image "$echo_ref" "$work/echo" /usr/local/bin/kipvs-echo serve,--name,kipvs-echo,--http,8080,--tcp,9000,--who
mkdir -p "$repo/.cache/cluster"
rm -rf "$out"
mkdir -p "$out"
mv "$tmp"/*.tar "$out/"
# Older image sets are dead weight.
find "$repo/.cache/cluster" -maxdepth 1 -name 'images-*' ! -path "$out" -exec rm -rf {} +
echo "cluster: images built in $((SECONDS - start))s in $out" >&2
echo "$out"

#!/usr/bin/env bash
# images.sh BINDIR: prints the folder holding the cluster's container images as `docker load`
# archives (linux/amd64), which the node imports with `ctr -n k8s.io images import`; no
# registry is involved, so each is tagged with the name pods and containerd ask for:
#   pause-amd64.tar           registry.k8s.io/pause:3.10.1       BINDIR/pause (our Go pause)
#   kipvs-echo-amd64.tar      kube-ipvs/kipvs-echo:cluster       cmd/kipvs-echo (test pods)
#   coredns-amd64.tar         registry.k8s.io/coredns/coredns:vX  BINDIR/coredns (cluster DNS)
#   kube-ipvs-cluster.tar     kube-ipvs:cluster                  `make image`, amd64 only
#   kube-ipvs-cluster-next.tar kube-ipvs:cluster-next            the same, rebuilt under
#                                                                another version (the rolling
#                                                                update's target)
# kube-ipvs's images are `make image`'s (hack/image/build.sh, Debian packages and all); the
# others are built with its Go tool from a root file system holding only their static binary.
# Cached in .cache/cluster/images-<key>, the key hashing the binaries, hack/image's sources
# and this script.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
bin=${1:?usage: images.sh BINDIR}
export PATH=$PATH:/usr/local/go/bin GOWORK=off

# The names the cluster uses: containerd's sandbox image (its config pins it) and the smoke
# pod's image.
pause_ref=registry.k8s.io/pause:3.10.1
echo_ref=kube-ipvs/kipvs-echo:cluster
coredns_version=$(awk '$1 == "github.com/coredns/coredns" {print $2}' "$repo/test/coredns/go.mod")
coredns_ref=registry.k8s.io/coredns/coredns:${coredns_version:?no coredns in test/coredns/go.mod}
kipvs_tags="cluster cluster-next"

work=$(mktemp -d "${TMPDIR:-/tmp}/kipvs-images.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/echo/usr/local/bin" "$work/pause" "$work/coredns"
(cd "$repo" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$work/echo/usr/local/bin/kipvs-echo" ./cmd/kipvs-echo)
# Only to key the cache: hack/image/build.sh builds its own, with the version stamped in.
(cd "$repo" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$work/kube-ipvs" ./cmd/kube-ipvs)
cp "$bin/pause" "$work/pause/pause"
cp "$bin/coredns" "$work/coredns/coredns"

key=$(cat "$work/echo/usr/local/bin/kipvs-echo" "$work/pause/pause" "$work/coredns/coredns" \
  "$work/kube-ipvs" "$repo"/hack/image/*.go "$repo"/hack/image/*.sh "$repo/hack/image/packages.txt" \
  "$repo/hack/image/go.sum" "${BASH_SOURCE[0]}" | sha256sum | cut -c1-16)
out=$repo/.cache/cluster/images-$key
names="pause-amd64.tar kipvs-echo-amd64.tar coredns-amd64.tar"
for t in $kipvs_tags; do names+=" kube-ipvs-$t.tar"; done
cached=1
for n in $names; do [[ -f $out/$n ]] || cached=0; done
if ((cached)); then
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
# Upstream's CoreDNS image is its binary as the entrypoint; the Deployment passes -conf.
image "$coredns_ref" "$work/coredns" /coredns
for t in $kipvs_tags; do
  IMAGE_ARCHES=amd64 IMAGE_OUT="$work/kipvs-$t" VERSION=$t "$repo/hack/image/build.sh" >/dev/null
  mv "$work/kipvs-$t/kube-ipvs-amd64.tar" "$tmp/kube-ipvs-$t.tar"
done
mkdir -p "$repo/.cache/cluster"
rm -rf "$out"
mkdir -p "$out"
mv "$tmp"/*.tar "$out/"
# Older image sets are dead weight.
find "$repo/.cache/cluster" -maxdepth 1 -name 'images-*' ! -path "$out" -exec rm -rf {} +
echo "cluster: images built in $((SECONDS - start))s in $out" >&2
echo "$out"

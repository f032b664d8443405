#!/usr/bin/env bash
# Prints the folder holding every binary of the real cluster (docs/cluster.md), building them on first
# use, each from its upstream Go module at a pinned version:
#   test/apiserver  k8s.io/kubernetes: kube-apiserver, kube-controller-manager, kube-scheduler,
#                   kubelet, kubectl, kube-proxy (make conformance PROXY=kube-proxy);
#                   go.etcd.io/etcd/server/v3: etcd
#   test/node       containerd, containerd-shim-runc-v2, ctr, runc, the CNI plugins (ptp,
#                   host-local, loopback, portmap, bridge), crictl, and pause (our own, in Go)
#   test/coredns    coredns
# They are cached in the git-ignored .cache/cluster/bin-<key>, the key being the hash of those
# modules' go.mod and go.sum, the pause source and this script: a version bump or a change of
# build flags rebuilds, nothing else does. The builds run under nice -n 19 (a guest test suite
# may be sharing these 2 cores); each binary's build time goes to stderr.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
apiserver=$repo/test/apiserver
node=$repo/test/node
coredns=$repo/test/coredns
export GOWORK=off

bins=(etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl kube-proxy
  containerd containerd-shim-runc-v2 ctr runc ptp host-local loopback portmap bridge crictl pause
  coredns)

key=$(cat "$apiserver/go.mod" "$apiserver/go.sum" "$node/go.mod" "$node/go.sum" \
  "$coredns/go.mod" "$coredns/go.sum" "$node"/cmd/pause/*.go "${BASH_SOURCE[0]}" |
  sha256sum | cut -c1-16)
out=$repo/.cache/cluster/bin-$key
cached=1
for b in "${bins[@]}"; do [[ -x $out/$b ]] || cached=0; done
if ((cached)); then
  echo "cluster: binaries from cache $out" >&2
  echo "$out"
  exit 0
fi

echo "cluster: building ${#bins[@]} binaries (key $key; takes long the first time)" >&2
mkdir -p "$repo/.cache/cluster"
tmp=$(mktemp -d "$repo/.cache/cluster/build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
start=$SECONDS

# version MOD PATH prints the version of module PATH that module directory MOD builds with.
version() { (cd "$1" && go list -m -f '{{.Version}}' "$2"); }

# build DIR NAME CGO TAGS LDFLAGS PKG builds package PKG of the module in DIR as $tmp/NAME.
build() {
  local dir=$1 name=$2 cgo=$3 tags=$4 ldflags=$5 pkg=$6 t=$SECONDS
  (cd "$dir" && CGO_ENABLED=$cgo nice -n 19 go build -trimpath -tags "$tags" \
    -ldflags "-s -w $ldflags" -o "$tmp/$name" "$pkg") ||
    { echo "cluster: building $name ($pkg) failed" >&2; exit 1; }
  echo "cluster: $name built in $((SECONDS - t))s" >&2
}

# Kubernetes: the version stamped the way upstream's build does (kubelet reports it as the
# node's version; kubectl version prints it).
kv=$(version "$apiserver" k8s.io/kubernetes)
kmajor=${kv#v} kminor=${kv#v*.}
kmajor=${kmajor%%.*} kminor=${kminor%%.*}
kpkg=k8s.io/component-base/version
kflags="-X $kpkg.gitVersion=$kv -X $kpkg.gitMajor=$kmajor -X $kpkg.gitMinor=$kminor"
kflags+=" -X $kpkg.gitTreeState=clean"
build "$apiserver" etcd 0 "" "" ./cmd/etcd
build "$apiserver" kube-apiserver 0 "" "$kflags" ./cmd/kube-apiserver
for c in kube-controller-manager kube-scheduler kubelet kubectl kube-proxy; do
  build "$apiserver" "$c" 0 "" "$kflags" "k8s.io/kubernetes/cmd/$c"
done

# containerd: its Makefile's static tags, and no_btrfs (the btrfs snapshotter needs cgo and
# the btrfs headers); the shim with no_grpc like upstream's.
cv=$(version "$node" github.com/containerd/containerd/v2)
cpkg=github.com/containerd/containerd/v2/version
cflags="-X $cpkg.Version=$cv -X $cpkg.Package=github.com/containerd/containerd/v2"
ctags="urfave_cli_no_docs osusergo netgo static_build no_btrfs"
build "$node" containerd 0 "$ctags" "$cflags" github.com/containerd/containerd/v2/cmd/containerd
build "$node" containerd-shim-runc-v2 0 "$ctags no_grpc" "$cflags" \
  github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2
build "$node" ctr 0 "$ctags" "$cflags" github.com/containerd/containerd/v2/cmd/ctr

# runc needs cgo (libcontainer/nsenter is C, run before the Go runtime starts), linked statically
# by gcc against glibc and libseccomp (libseccomp-dev, hack/deps.sh). Its Makefile's default tags
# are "seccomp urfave_cli_no_docs libpathrs": seccomp is needed, since containerd's CRI gives
# pod sandboxes a seccomp profile whatever the pod asks (a runc without it fails every pod with
# "seccomp: config provided but seccomp not supported"); libpathrs is left out because it
# links a Rust library (runc falls back to its pure-Go pathrs-lite).
build "$node" runc 1 "seccomp urfave_cli_no_docs netgo osusergo" "-extldflags -static" \
  github.com/opencontainers/runc

pv=$(version "$node" github.com/containernetworking/plugins)
pflags="-X github.com/containernetworking/plugins/pkg/utils/buildversion.BuildVersion=$pv"
for p in main/ptp ipam/host-local main/loopback meta/portmap main/bridge; do
  build "$node" "${p#*/}" 0 "" "$pflags" "github.com/containernetworking/plugins/plugins/$p"
done

crv=$(version "$node" sigs.k8s.io/cri-tools)
build "$node" crictl 0 "" "-X sigs.k8s.io/cri-tools/pkg/version.Version=$crv" \
  sigs.k8s.io/cri-tools/cmd/crictl
build "$node" pause 0 "" "" ./cmd/pause

build "$coredns" coredns 0 "" "" github.com/coredns/coredns

rm -rf "$out"
mv "$tmp" "$out"
trap - EXIT
echo "cluster: built in $((SECONDS - start))s, $(du -sh "$out" | cut -f1) in $out" >&2
echo "$out"

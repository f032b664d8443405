#!/usr/bin/env bash
# run.sh [smoke|all|conformance|sli [cluster-host's flags]]: make cluster (smoke) and make
# cluster-test (all), docs/cluster.md; hack/conformance/run.sh runs it with conformance,
# hack/sli/run.sh with sli.
# Builds (or takes from .cache/cluster/) the cluster's binaries and images, stages the node's
# payload (the binaries in /usr/local/bin, the CNI plugins in /opt/cni/bin, the images,
# hack/cluster/node.sh as the entry), then runs test/apiserver's cluster-host, which starts
# the control plane on the host's loopback, boots the guest as the node, deploys kube-ipvs
# and CoreDNS and runs the checks; exits with their status. PROXY=kube-proxy (make cluster and
# make cluster-test) runs the checks that apply to it with kube-proxy v1.37 in IPVS mode in
# place of kube-ipvs (hack/cluster/kube-proxy), the reference they are compared with.
# NODES=N (default 1) runs N nodes in the guest (docs/cluster.md); a number the guest's
# memory cannot hold stops the run before anything is built.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../guest/common.sh"
cd "$REPO_ROOT"
start=$SECONDS
# cluster-host's last line says how long the whole run took.
export CLUSTER_T0=${CLUSTER_T0:-$(date +%s)}
checks=${1:-smoke}
shift || true

stage=$(mktemp -d "${TMPDIR:-/tmp}/kipvs-cluster-stage.XXXXXX")
tools=$(mktemp -d "${TMPDIR:-/tmp}/kipvs-cluster-tools.XXXXXX")
trap 'rm -rf "$stage" "$tools"' EXIT
(cd test/apiserver && GOWORK=off CGO_ENABLED=0 go build -trimpath -o "$tools/cluster-host" ./cmd/cluster-host) ||
  die "building test/apiserver/cmd/cluster-host failed"
nodes=${NODES:-1}
# The guest memory N nodes need, or why N cannot run here.
need=$("$tools/cluster-host" --checks validate --nodes "$nodes") || exit 2
export GUEST_MEM=${GUEST_MEM:-$need}

"$REPO_ROOT/hack/deps.sh"
bin=$("$REPO_ROOT/hack/cluster/binaries.sh")
images=$("$REPO_ROOT/hack/cluster/images.sh" "$bin")
proxy=()
if [[ $checks != conformance && ${PROXY:-kube-ipvs} != kube-ipvs ]]; then
  [[ $PROXY == kube-proxy ]] || die "PROXY=$PROXY: want kube-ipvs or kube-proxy"
  CLUSTER_EXTRA_IMAGES=$("$REPO_ROOT/hack/cluster/kube-proxy-image.sh" "$bin")
  proxy=(--proxy kube-proxy)
fi

mkdir -p "$stage/payload/images" "$stage/usr/local/bin" "$stage/opt/cni/bin"
for b in containerd containerd-shim-runc-v2 ctr runc kubelet; do
  cp "$bin/$b" "$stage/usr/local/bin/"
done
# The client of the checks' requests from outside the node.
(cd "$REPO_ROOT" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$stage/usr/local/bin/kipvs-echo" ./cmd/kipvs-echo)
for p in ptp host-local loopback portmap; do
  cp "$bin/$p" "$stage/opt/cni/bin/"
done
cp "$images"/*.tar "$stage/payload/images/"
# The rolling update's target is only make cluster-test's.
[[ $checks != conformance ]] || rm -f "$stage/payload/images/kube-ipvs-cluster-next.tar"
# make conformance: images imported with the others (CLUSTER_EXTRA_IMAGES, a folder: the
# kube-proxy image) and the suite's, imported in the background
# (CLUSTER_CONFORMANCE_IMAGES, hack/conformance/build.sh's images/).
if [[ -n ${CLUSTER_EXTRA_IMAGES:-} ]]; then
  cp "$CLUSTER_EXTRA_IMAGES"/*.tar "$stage/payload/images/"
fi
if [[ -n ${CLUSTER_CONFORMANCE_IMAGES:-} ]]; then
  mkdir -p "$stage/payload/images/conformance"
  cp "$CLUSTER_CONFORMANCE_IMAGES"/*.tar "$stage/payload/images/conformance/"
fi
install -m 0755 hack/cluster/node.sh "$stage/payload/entry"
install -m 0755 hack/cluster/node-init.sh "$stage/payload/node-init"
# util-linux's unshare (it needs only the C library, which the guest has): busybox's cannot
# make a cgroup namespace, which each node has.
cp /usr/bin/unshare "$stage/usr/local/bin/"
(cd test/apiserver && GOWORK=off CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$stage/payload/cluster-node" ./cmd/cluster-node) ||
  die "building test/apiserver/cmd/cluster-node failed"
echo "cluster: binaries, images and payload ($(du -sm "$stage" | cut -f1) MiB) ready after $((SECONDS - start))s" >&2

# Its last line is the result: "make cluster[-test]: N passed, M failed in T" (make
# conformance: "make conformance: ...").
"$tools/cluster-host" --bin "$bin" --repo "$REPO_ROOT" --stage "$stage" --checks "$checks" --nodes "$nodes" "${proxy[@]}" "$@"

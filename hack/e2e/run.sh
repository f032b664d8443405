#!/usr/bin/env bash
# make e2e: kube-ipvs in the QEMU guest against a real kube-apiserver and etcd on the host's
# loopback. Builds (or takes from .cache/e2e/) kube-apiserver and etcd, builds kube-ipvs,
# kipvs-echo and the two test programs of test/apiserver, then runs e2e-host, which starts
# the cluster, boots the guest and exits with the guest scenario's status.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../guest/common.sh"
source "$GUEST_DIR/build.sh"
cd "$REPO_ROOT"
start=$SECONDS

"$REPO_ROOT/hack/deps.sh"
bin=$("$REPO_ROOT/hack/e2e/binaries.sh")

stage=$(mktemp -d "${TMPDIR:-/tmp}/kipvs-e2e-stage.XXXXXX")
tools=$(mktemp -d "${TMPDIR:-/tmp}/kipvs-e2e-tools.XXXXXX")
trap 'rm -rf "$stage" "$tools"' EXIT
build_tools "$stage/usr/local/bin"
mkdir -p "$stage/payload"
(cd test/apiserver && GOWORK=off CGO_ENABLED=0 go build -trimpath -o "$tools/e2e-host" ./cmd/e2e-host) ||
  die "building test/apiserver/cmd/e2e-host failed"
(cd test/apiserver && GOWORK=off CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$stage/payload/e2e-guest" ./cmd/e2e-guest) ||
  die "building test/apiserver/cmd/e2e-guest failed"
echo "e2e: binaries ready after $((SECONDS - start))s" >&2

set +e
"$tools/e2e-host" --bin "$bin" --repo "$REPO_ROOT" --stage "$stage"
rc=$?
set -e
kernel="kernel $(cat "$("$GUEST_DIR/image.sh")/kernel-version")"
if ((rc == 0)); then
  echo "make e2e: passed in $((SECONDS - start))s ($kernel)" >&2
else
  echo "make e2e: FAILED (exit status $rc) after $((SECONDS - start))s ($kernel)" >&2
fi
exit "$rc"

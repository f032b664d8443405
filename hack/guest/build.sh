# Builds the project binary for the guest. Sourced by run.sh and test.sh.
# shellcheck shell=bash

# build_kube_ipvs DEST: a static kube-ipvs (no cgo: the guest has no Go toolchain, and a static
# binary needs none of the image's libraries).
build_kube_ipvs() {
  local dest=$1 version
  version=$(git -C "$REPO_ROOT" describe --always --dirty 2>/dev/null || echo dev)
  mkdir -p "$(dirname "$dest")"
  (cd "$REPO_ROOT" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=$version" \
    -o "$dest" ./cmd/kube-ipvs) || die "building kube-ipvs failed"
}

# Builds the project binary for the guest. Sourced by run.sh and test.sh.
# shellcheck shell=bash

# build_tools BINDIR: static builds of kube-ipvs and the test backend kipvs-echo (no cgo: the
# guest has no Go toolchain, and a static binary needs none of the image's libraries).
build_tools() {
  local dest=$1 version
  version=$(git -C "$REPO_ROOT" describe --always --dirty 2>/dev/null || echo dev)
  mkdir -p "$dest"
  (cd "$REPO_ROOT" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=$version" \
    -o "$dest/kube-ipvs" ./cmd/kube-ipvs) || die "building kube-ipvs failed"
  (cd "$REPO_ROOT" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" \
    -o "$dest/kipvs-echo" ./cmd/kipvs-echo) || die "building kipvs-echo failed"
}

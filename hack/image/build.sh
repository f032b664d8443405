#!/usr/bin/env bash
# make image: builds kube-ipvs's OCI image for linux/amd64 and linux/arm64 without a container
# engine. Per architecture: a static kube-ipvs (GOARCH, CGO_ENABLED=0), the root file system
# of hack/image/rootfs.sh (Debian packages), then hack/image's Go tool writes
#   _output/image/oci/               an OCI image layout holding the image index
#   _output/image/kube-ipvs-ARCH.tar a `docker load` archive per architecture
#   _output/image/packages-ARCH.txt  the Debian packages and versions in the image
# and prints the digests and sizes. The same commit and package versions give the same
# digests: every file time is the commit's time, entries are sorted, owners are 0:0.
#
# Environment: IMAGE_OUT (default _output/image), IMAGE_ARCHES ("amd64 arm64"), VERSION (git
# describe), IMAGE_CACHE (.cache/image: apt state and downloaded packages, reused).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
export PATH=$PATH:/usr/local/go/bin
log() { printf 'image: %s\n' "$*" >&2; }

out=${IMAGE_OUT:-$repo/_output/image}
arches=${IMAGE_ARCHES:-amd64 arm64}
version=${VERSION:-$(git -C "$repo" describe --always --dirty 2>/dev/null || echo dev)}
revision=$(git -C "$repo" rev-parse HEAD)
created=$(git -C "$repo" log -1 --format=%ct HEAD)

"$repo/hack/deps.sh"
mkdir -p "$out"
work=$(mktemp -d "$out/.build.XXXXXX")
trap 'rm -rf "$work"' EXIT

roots=()
for arch in $arches; do
  root=$work/root-$arch
  mkdir -p "$root"
  "$here/rootfs.sh" "$arch" "$root"
  (cd "$repo" && CGO_ENABLED=0 GOOS=linux GOARCH=$arch go build -trimpath \
    -ldflags "-s -w -X main.version=$version" -o "$root/usr/local/bin/kube-ipvs" ./cmd/kube-ipvs)
  cp "$root/usr/share/kube-ipvs/packages.txt" "$out/packages-$arch.txt"
  roots+=(--root "linux/$arch=$root")
done

(cd "$here" && GOWORK=off go build -trimpath -o "$work/image" .)
"$work/image" build "${roots[@]}" --name kube-ipvs --version "$version" --revision "$revision" \
  --created "$created" --out "$out" | tee "$out/summary.txt"
for arch in $arches; do
  echo "Debian packages in linux/$arch ($(wc -l <"$out/packages-$arch.txt")):"
  sed 's/^/  /' "$out/packages-$arch.txt"
done
log "wrote $out/oci and $out/kube-ipvs-{${arches// /,}}.tar"

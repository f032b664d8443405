#!/usr/bin/env bash
# guest-payload.sh DIR: what test/scenarios/image.sh needs in the guest (its "guest-prepare"
# program; hack/guest/run.sh calls it with an empty DIR that the guest sees as
# /payload/prepared):
#   DIR/rootfs/          the linux/amd64 root file system of the image `make image` built
#   DIR/image-config.sh  that image's entrypoint, cmd, env and user (bash)
#   DIR/podspec.sh       deploy/daemonset.yaml's containers as the kubelet would run them
#   DIR/podfiles/        the files of its configMap volumes (deploy/configmap.yaml)
#   DIR/manifests/       the demo's Services, EndpointSlices and Node (examples/*.yaml)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
dir=${1:?usage: guest-payload.sh DIR}
export PATH=$PATH:/usr/local/go/bin
out=${IMAGE_OUT:-$repo/_output/image}

# The whole `make image`, so the guest runs the very artefact users get.
IMAGE_OUT=$out "$here/build.sh" >&2
tool=$(mktemp -d)
trap 'rm -rf "$tool"' EXIT
(cd "$here" && GOWORK=off go build -trimpath -o "$tool/image" .)
"$tool/image" unpack --layout "$out/oci" --platform linux/amd64 --root "$dir/rootfs" --config "$dir/image-config.sh"
(cd "$repo" && go run ./test/podspec --node demo-node --files "$dir/podfiles") >"$dir/podspec.sh"
mkdir -p "$dir/manifests"
cp "$repo"/examples/*.yaml "$dir/manifests/"
printf 'image: guest payload: %s of root file system, %s\n' "$(du -sh "$dir/rootfs" | cut -f1)" \
  "$(sed -n 1p "$out/summary.txt")" >&2

#!/usr/bin/env bash
# make guest-run SCRIPT=path/to/script.sh
#
# Copies the folder that holds SCRIPT into the guest (as /payload/scenario), puts a fresh
# static build of kube-ipvs at /usr/local/bin/kube-ipvs, runs `bash SCRIPT` from that folder
# with the tools on PATH, streams its output and exits with its exit status.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
source "$GUEST_DIR/build.sh"

script=${1:-}
[[ -n $script ]] || die "usage: make guest-run SCRIPT=path/to/script.sh" 2
[[ -f $script ]] || die "script $script does not exist" 2
dir=$(cd "$(dirname "$script")" && pwd)
name=$(basename "$script")

stage=$(mktemp -d "${TMPDIR:-/tmp}/kipvs-stage.XXXXXX")
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/payload/scenario"
# The scenario's own folder, without version control or the bench's cache.
tar -C "$dir" --exclude=./.git --exclude=./.cache -chf - . | tar -C "$stage/payload/scenario" -xf -
size_mb=$(du -sm "$stage/payload/scenario" | cut -f1)
((size_mb <= 512)) || die "the folder of $script holds ${size_mb} MiB; keep scenarios in a small folder of their own" 2
build_tools "$stage/usr/local/bin"

cat >"$stage/payload/entry" <<ENTRY
cd /payload/scenario || exit 120
exec bash ./$(printf '%q' "$name")
ENTRY
exec "$GUEST_DIR/boot.sh" "$stage"

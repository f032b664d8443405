#!/usr/bin/env bash
# make guest-run SCRIPT=path/to/script.sh
#
# Copies the folder that holds SCRIPT into the guest (as /payload/scenario), puts a fresh
# static build of kube-ipvs at /usr/local/bin/kube-ipvs, runs `bash SCRIPT` from that folder
# with the tools on PATH, streams its output and exits with its exit status.
#
# A script whose leading comments hold "# guest-prepare: PROGRAM" (a path in the repository)
# gets what PROGRAM makes on the host: run from the repository root as `PROGRAM DIR`, it fills
# the empty folder DIR, which the guest sees as /payload/prepared (the image proof unpacks
# the built image there).
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
prepare=$(header_values "$script" guest-prepare)
if [[ -n $prepare ]]; then
  mkdir -p "$stage/payload/prepared"
  log "preparing the payload: $prepare"
  (cd "$REPO_ROOT" && "./$prepare" "$stage/payload/prepared") || die "$prepare failed: the scenario cannot run"
fi

cat >"$stage/payload/entry" <<ENTRY
cd /payload/scenario || exit 120
exec bash ./$(printf '%q' "$name")
ENTRY
# Not exec: the trap must remove the stage (a prepared payload can be tens of MiB).
rc=0
"$GUEST_DIR/boot.sh" "$stage" || rc=$?
exit "$rc"

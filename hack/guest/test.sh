#!/usr/bin/env bash
# make guest-test: builds the test binary of every package that has tests tagged "guest"
# (`go test -c -tags guest`, static), boots the guest and runs them all there, printing go
# test's usual output. Exits non-zero when any test fails or the guest itself fails.
#
# Environment: GUEST_TEST_PKGS (space-separated package folders, default all guest packages),
# GUEST_TEST_RUN (a -run pattern), GUEST_TEST_ARGS (more test binary flags, e.g. -test.count=2),
# and boot.sh's GUEST_* settings.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
source "$GUEST_DIR/build.sh"
cd "$REPO_ROOT"

if [[ -n ${GUEST_TEST_PKGS:-} ]]; then
  read -r -a pkgs <<<"$GUEST_TEST_PKGS"
else
  mapfile -t pkgs < <(git ls-files --cached --others --exclude-standard -- '*_test.go' |
    xargs -r grep -l '^//go:build.*\bguest\b' | xargs -r -n1 dirname | sort -u | sed 's|^|./|')
fi
((${#pkgs[@]} > 0)) || die "no package has tests tagged guest: nothing would run" 1

stage=$(mktemp -d "${TMPDIR:-/tmp}/kipvs-stage.XXXXXX")
trap 'rm -rf "$stage"' EXIT
build_tools "$stage/usr/local/bin"

list=$stage/payload/tests.list
mkdir -p "$stage/payload/tests"
: >"$list"
for dir in "${pkgs[@]}"; do
  dir=./${dir#./}
  import=$(go list -tags guest "$dir")
  bin=$(echo "${dir#./}" | tr / _).test
  dest=$stage/payload/tests/${dir#./}
  mkdir -p "$dest"
  CGO_ENABLED=0 go test -c -tags guest -trimpath -ldflags "-s -w" -o "$dest/$bin" "$dir" ||
    die "building the guest tests of $import failed"
  [[ -x $dest/$bin ]] || die "$import has no tests tagged guest (go test -c built nothing)"
  [[ -d $dir/testdata ]] && cp -a "$dir/testdata" "$dest/"
  printf '%s %s %s\n' "${dir#./}" "$bin" "$import" >>"$list"
done

args=(-test.v)
[[ -n ${GUEST_TEST_RUN:-} ]] && args+=("-test.run=$GUEST_TEST_RUN")
[[ -n ${GUEST_TEST_ARGS:-} ]] && read -r -a more <<<"$GUEST_TEST_ARGS" && args+=("${more[@]}")

cat >"$stage/payload/entry" <<ENTRY
echo "=== guest: kernel \$(uname -r), \$(nproc) CPUs, running $(wc -l <"$list") guest test package(s)"
status=0
while read -r dir bin import; do
  if [[ ! -x /payload/tests/\$dir/\$bin ]]; then
    echo "FAIL	\$import	(test binary \$bin is missing from the guest)"
    status=1
    continue
  fi
  echo "=== guest: package \$import"
  start=\$EPOCHREALTIME
  (cd "/payload/tests/\$dir" && "./\$bin" $(printf '%q ' "${args[@]}"))
  rc=\$?
  took=\$(awk -v a="\$start" -v b="\$EPOCHREALTIME" 'BEGIN { printf "%.3fs", b - a }')
  if [[ \$rc == 0 ]]; then
    echo "ok  	\$import	\$took	(in guest kernel \$(uname -r))"
  else
    echo "FAIL	\$import	\$took	(in guest kernel \$(uname -r))"
    status=1
  fi
done </payload/tests.list
exit \$status
ENTRY
# The whole guest suite takes about seven minutes on an idle 2-core machine and more than
# twice that when the machine is shared; the timeout only detects a hung guest, so it is
# generous here.
GUEST_TIMEOUT=${GUEST_TIMEOUT:-2400} exec "$GUEST_DIR/boot.sh" "$stage"

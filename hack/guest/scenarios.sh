#!/usr/bin/env bash
# make guest-scenarios: runs every test/scenarios/*.sh in a guest of its own (one boot each,
# through hack/guest/run.sh), prints PASS or FAIL per scenario and "N passed, N failed",
# and exits non-zero when any failed.
#
# A scenario may ask for kernel arguments in its leading comment block:
#   # guest-append: kipvs.nopreload
# (several such lines add up; they go after GUEST_APPEND, see boot.sh).
#
# Environment: SCENARIOS (space-separated names or paths to run instead of all, e.g.
# "preflight-no-ipvs"), SCENARIO_TIMEOUT (seconds per guest, default 300), and boot.sh's
# GUEST_* settings.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

dir=$REPO_ROOT/test/scenarios
scripts=()
if [[ -n ${SCENARIOS:-} ]]; then
  for s in $SCENARIOS; do
    if [[ -f $s ]]; then
      scripts+=("$(cd "$(dirname "$s")" && pwd)/$(basename "$s")")
    elif [[ -f $dir/$s.sh ]]; then
      scripts+=("$dir/$s.sh")
    elif [[ -f $dir/$s ]]; then
      scripts+=("$dir/$s")
    else
      die "scenario $s: neither a file nor test/scenarios/$s.sh" 2
    fi
  done
else
  shopt -s nullglob
  # Helpers the scenarios source (test/scenarios/lib/) are not scenarios themselves.
  scripts=("$dir"/*.sh)
  shopt -u nullglob
fi
((${#scripts[@]} > 0)) || die "no scenario in $dir (test/scenarios/*.sh): nothing would run" 1

bench_failure() {
  case $1 in
  124) echo " (the guest hung past its timeout)" ;;
  125) echo " (the guest kernel panicked or init died)" ;;
  126) echo " (a core kernel module failed to load)" ;;
  127) echo " (a tool is missing from the guest image)" ;;
  esac
}

# Build (or find) the image first, so the first scenario's time is its own, and name the
# kernel on every result line: the same scenarios run on several kernels (GUEST_KERNEL).
image=$("$GUEST_DIR/image.sh")
kernel="kernel $(cat "$image/kernel-version")"

passed=0 failed=0 results=()
for script in "${scripts[@]}"; do
  name=$(basename "$script" .sh)
  append=$(header_values "$script" guest-append)
  log "scenario $name${append:+ (kernel arguments: $append)}"
  start=$SECONDS
  set +e
  GUEST_APPEND="${GUEST_APPEND:-}${append:+ $append}" GUEST_TIMEOUT=${SCENARIO_TIMEOUT:-${GUEST_TIMEOUT:-300}} \
    "$GUEST_DIR/run.sh" "$script"
  rc=$?
  set -e
  took=$((SECONDS - start))
  if [[ $rc == 0 ]]; then
    results+=("PASS  $name  ${took}s  ($kernel)")
    passed=$((passed + 1))
  else
    results+=("FAIL  $name  ${took}s  exit $rc$(bench_failure "$rc")  ($kernel)")
    failed=$((failed + 1))
  fi
  echo "${results[-1]}"
done

echo
echo "=== scenarios on $kernel"
printf '%s\n' "${results[@]}"
echo "$passed passed, $failed failed ($kernel)"
((failed == 0))

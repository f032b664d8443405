#!/usr/bin/env bash
# make kernel-matrix: the end-to-end traffic suites on the kernels other than the default one.
# For each kernel of KERNEL_MATRIX (default: 5.10 and 6.12, the supported kernels other than
# GUEST_KERNEL, whose whole suite make test runs) it runs, one guest at a time:
#   e2e        make e2e (kube-ipvs in the guest against a real kube-apiserver and etcd)
#   e2e-pkg    the guest tests of test/e2e (the proxy binary against real traffic)
#   scenarios  make guest-scenarios (every test/scenarios/*.sh)
# Every result line names the kernel; the summary lists them all, and the script exits
# non-zero when any failed. KERNEL_MATRIX_SUITES picks suites (default "e2e-pkg scenarios e2e");
# KERNEL_MATRIX_E2E_SKIP, a go test -skip pattern, leaves tests of test/e2e out (make test
# leaves out those that exercise only the proxy's own logic, see TEST_KERNEL_E2E_SKIP).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$REPO_ROOT"

# By default every supported kernel but the one the rest of make test boots (GUEST_KERNEL).
others=()
for k in 5.10 6.1 6.12; do
  [[ $k == "${GUEST_KERNEL:-6.1}" ]] || others+=("$k")
done
read -r -a kernels <<<"${KERNEL_MATRIX:-${others[*]}}"
read -r -a suites <<<"${KERNEL_MATRIX_SUITES:-e2e-pkg scenarios e2e}"

run_suite() {
  case $1 in
  e2e) hack/e2e/run.sh ;;
  e2e-pkg)
    GUEST_TEST_PKGS=./test/e2e GUEST_TEST_ARGS="${GUEST_TEST_ARGS:-}${KERNEL_MATRIX_E2E_SKIP:+ -test.skip=$KERNEL_MATRIX_E2E_SKIP}" \
      hack/guest/test.sh
    ;;
  scenarios) hack/guest/scenarios.sh ;;
  *) die "unknown suite $1 (KERNEL_MATRIX_SUITES: e2e, e2e-pkg, scenarios)" 2 ;;
  esac
}

results=() failed=0 start_all=$SECONDS
for k in "${kernels[@]}"; do
  start=$SECONDS
  if ! image=$(GUEST_KERNEL=$k "$GUEST_DIR/image.sh"); then
    results+=("FAIL  kernel $k  image  $((SECONDS - start))s  (the guest image could not be built)")
    failed=$((failed + 1))
    echo "${results[-1]}"
    continue
  fi
  label="kernel $k ($(cat "$image/kernel-version"))"
  log "$label: $(cat "$image/kernel-package" 2>/dev/null || echo 'package unknown'), image ready in $((SECONDS - start))s"
  for s in "${suites[@]}"; do
    log "=== $label: $s"
    start=$SECONDS
    set +e
    GUEST_KERNEL=$k run_suite "$s"
    rc=$?
    set -e
    took="$((SECONDS - start))s (load $(cut -d' ' -f1 /proc/loadavg))"
    if ((rc == 0)); then
      results+=("PASS  $label  $s  $took")
    else
      results+=("FAIL  $label  $s  $took  exit $rc")
      failed=$((failed + 1))
    fi
    echo "${results[-1]}"
  done
done

echo
# The load average goes with the times: on a shared machine the guest runs under emulation
# slow down with it.
echo "=== kernel matrix (${kernels[*]}) in $((SECONDS - start_all))s, load average $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%s\n' "${results[@]}"
echo "${#results[@]} suite runs, $failed failed"
((failed == 0))

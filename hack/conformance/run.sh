#!/usr/bin/env bash
# run.sh: make conformance (docs/conformance.md). Builds (or takes from .cache/) what the run
# needs: the cluster's binaries and images (hack/cluster/binaries.sh, images.sh), e2e.test,
# ginkgo and the suite's images (hack/conformance/build.sh), and with PROXY=kube-proxy
# kube-proxy's image (hack/cluster/kube-proxy-image.sh); then brings the cluster up
# exactly as make cluster does (hack/cluster/run.sh conformance), deploys the proxy and CoreDNS,
# and runs e2e.test on the host against it. A run of a SELECTION other than sig-network into
# the default REPORT, without FOCUS or SKIP, is published: its results.json is copied to
# docs/conformance-results/ and docs/conformance.md is generated again
# (test/apiserver/cmd/conformance-report). Its last line is
#   make conformance: N passed, M failed in T
# and it exits 0 only when no selected spec failed.
#
# Environment (make conformance passes its variables through):
#   SELECTION  services (default): the 15 [sig-network] Services [Conformance] specs;
#              sig-network: focus \[sig-network\], skip the terms of
#              hack/conformance/sig-network-skip.txt (each with its reason there), in one run;
#              sig-network-services and sig-network-others: the same specs in two runs, the
#              "[sig-network] Services ..." ones and the rest (docs/conformance.md shows these)
#              sig-network-serial: the [Serial] specs of the same focus, which the others leave
#              out, less hack/conformance/serial-skip.txt's; run with PROCS=1
#              sig-network-zones: the specs of hack/conformance/nodes-skip.txt that need six
#              nodes (three zones of two: three Traffic Distribution specs), with the same
#              skip; it stops at once when NODES is below 6
#   FOCUS   ginkgo's focus, in place of the selection's (the selection is then "custom")
#   SKIP    ginkgo's skip, in place of the selection's
#   PROXY   kube-ipvs (default; deploy/ as shipped) or kube-proxy (v1.37 in IPVS mode)
#   PROCS   ginkgo's parallel processes (default 1)
#   NODES   the cluster's nodes (default 1; docs/cluster.md); the sig-network* selections skip
#           by name the specs that need more (hack/conformance/nodes-skip.txt: each term with the
#           fewest nodes it needs, and why)
#   REPORT  the report folder (default _output/conformance/SELECTION/PROXY): junit_01.xml, e2e.log, run.log and
#           results.json (per spec: passed, failed or skipped, seconds, the failure's first line)
#   CONFORMANCE_TIMEOUT  ginkgo's suite timeout (default 6h); GUEST_TIMEOUT (seconds) of the
#           guest, default the suite timeout plus an hour; NODE_MEM (MiB) each node gets,
#           default the most from 2048 to 4096 (in steps of 256) that NODES nodes fit in the
#           guest's limit (cluster-host --checks node-mem; the guest: 2048 more)
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$repo"
export CLUSTER_T0=${CLUSTER_T0:-$(date +%s)}
proxy=${PROXY:-kube-ipvs}
selection=${SELECTION:-services}
nodes=${NODES:-1}
export NODES=$nodes
if [[ ! $nodes =~ ^[1-9][0-9]*$ ]]; then
  echo "conformance: NODES=$nodes: want a number of nodes, 1 or more" >&2
  exit 2
fi
# The terms of nodes-skip.txt ("MIN<TAB>term<TAB>reason") whose specs need more than NODES
# nodes, or (with an argument) exactly that many, joined with "|".
nodes_terms() {
  awk -F'\t' -v n="$nodes" -v exact="${1:-}" \
    '!/^#/ && NF == 3 && (exact == "" ? n < $1 + 0 : exact == $1 + 0) { print $2 }' \
    hack/conformance/nodes-skip.txt | paste -sd'|'
}
case $selection in
services)
  focus='\[sig-network\] Services.*\[Conformance\]'
  skip=''
  ;;
sig-network | sig-network-services | sig-network-others | sig-network-serial | sig-network-zones)
  # One term per line, its reason after a tab; comments start with #.
  terms() { grep -v '^#' "$1" | cut -f1 | paste -sd'|'; }
  focus='\[sig-network\]'
  skip=$(terms hack/conformance/sig-network-skip.txt)
  case $selection in
  sig-network-services) focus='\[sig-network\] Services\s' ;;
  sig-network-others) skip+="|$(terms hack/conformance/sig-network-others-skip.txt)" ;;
  sig-network-serial)
    # The [Serial] specs the others leave out, in a run of their own with one process; the
    # rest of the skip holds, and serial-skip.txt names the [Serial] specs left out here.
    focus='\[sig-network\].*\[Serial\]'
    skip=$(grep -v '^#' hack/conformance/sig-network-skip.txt | cut -f1 | grep -vxF '\[Serial\]' | paste -sd'|')
    serial=$(terms hack/conformance/serial-skip.txt)
    [[ -z $serial ]] || skip+="|$serial"
    ;;
  sig-network-zones)
    # The specs that need three zones of two schedulable nodes each, which every other
    # selection leaves out below six nodes; checked here, before anything is built.
    if ((nodes < 6)); then
      echo "conformance: SELECTION=sig-network-zones needs NODES=6 or more (three zones with two schedulable nodes each); NODES=$nodes" >&2
      exit 2
    fi
    zones=$(nodes_terms 6)
    [[ -n $zones ]] || { echo "conformance: hack/conformance/nodes-skip.txt has no term for six nodes" >&2; exit 2; }
    focus="\[sig-network\] ($zones)"
    ;;
  esac
  few=$(nodes_terms)
  [[ -z $few ]] || skip+="|$few"
  ;;
*) echo "conformance: SELECTION=$selection: want services, sig-network, sig-network-services, sig-network-others, sig-network-serial or sig-network-zones" >&2; exit 2 ;;
esac
if [[ -n ${FOCUS:-} || -n ${SKIP:-} ]]; then
  selection=custom
  focus=${FOCUS:-$focus}
  skip=${SKIP:-$skip}
fi
procs=${PROCS:-1}
report=${REPORT:-$repo/_output/conformance/$selection/$proxy}
timeout=${CONFORMANCE_TIMEOUT:-6h}
case $proxy in
kube-ipvs | kube-proxy) ;;
*) echo "conformance: PROXY=$proxy: want kube-ipvs or kube-proxy" >&2; exit 2 ;;
esac
# Each node's memory (the suite's images and Pods), or why NODES nodes do not fit, before
# anything else is built: NODE_MEM when set, else the most up to 4096 MiB that the guest's
# limit holds for NODES nodes (six nodes of 4096 do not fit a 24 GiB machine). The flags are
# hack/cluster/run.sh's, so that its build of cluster-host reuses Go's cache.
tools=$(mktemp -d "${TMPDIR:-/tmp}/kipvs-conformance-tools.XXXXXX")
trap 'rm -rf "$tools"' EXIT
(cd test/apiserver && GOWORK=off CGO_ENABLED=0 go build -trimpath -o "$tools/cluster-host" ./cmd/cluster-host)
mem=$("$tools/cluster-host" --checks node-mem --nodes "$nodes") || exit 2
export NODE_MEM=$mem

hack/deps.sh
start=$SECONDS
conf=$(hack/conformance/build.sh)
if [[ $proxy == kube-proxy ]]; then
  bin=$(hack/cluster/binaries.sh)
  CLUSTER_EXTRA_IMAGES=$(hack/cluster/kube-proxy-image.sh "$bin")
  export CLUSTER_EXTRA_IMAGES
fi
echo "conformance: e2e.test and its images ready after $((SECONDS - start))s" >&2
# A focus or skip that selects nothing (or not what was meant) shows here, in a second,
# rather than after the cluster's bring-up: ginkgo's dry run counts the specs.
dry=(--provider=skeleton --ginkgo.dry-run --ginkgo.no-color "--ginkgo.focus=$focus")
[[ -z $skip ]] || dry+=("--ginkgo.skip=$skip")
selected=$("$conf/e2e.test" "${dry[@]}" 2>&1 | sed -n 's/^Ran \([0-9]*\) of \([0-9]*\) Specs.*/\1 of \2/p')
if [[ -z $selected || $selected == 0\ * ]]; then
  echo "conformance: the focus and skip select no spec (ginkgo dry run: ${selected:-no count})" >&2
  exit 2
fi
echo "conformance: the focus and skip select ${selected} specs (ginkgo dry run)" >&2
export CLUSTER_CONFORMANCE_IMAGES=$conf/images
# The guest's lifetime (GUEST_TIMEOUT) is cluster-host's: the suite's timeout and an hour more
# for the bring-up.

# What results.json (and the docs generated from it) quote as the command.
cmd="make conformance PROXY=$proxy"
if [[ $selection == custom ]]; then
  cmd+=" FOCUS='$focus'"
  [[ -z $skip ]] || cmd+=" SKIP='$skip'"
elif [[ $selection != services ]]; then
  cmd+=" SELECTION=$selection"
fi
[[ $procs == 1 ]] || cmd+=" PROCS=$procs"
[[ $nodes == 1 ]] || cmd+=" NODES=$nodes"
export CONFORMANCE_COMMAND=$cmd
mkdir -p "$report"
args=(--conformance "$conf" --report "$report" --proxy "$proxy" --focus "$focus" --procs "$procs"
  --timeout "$timeout")
[[ -z $skip ]] || args+=(--skip "$skip")
# What results.json (and the page) says the run was made of: this checkout and the suite's
# build.
export CONFORMANCE_BUILD="kube-ipvs $(git describe --always --dirty 2>/dev/null || echo unknown), e2e.test and images ${conf##*/}, $nodes node(s)"

# A run of a published selection into the default folder is published: its results.json goes to
# docs/conformance-results/SELECTION/PROXY.json and docs/conformance.md is generated again from
# all four (the page shows the latest run of each selection and proxy, each with its build).
publish=
# SELECTION=sig-network is not: the page shows its two halves, each run by both proxies within
# one 3-hour job on this project's machines (docs/conformance-build.md).
[[ $selection == custom || $selection == sig-network || -n ${REPORT:-} ]] ||
  publish=docs/conformance-results/$selection/$proxy.json
rm -f "$report/results.json"
set +e
hack/cluster/run.sh conformance "${args[@]}" 2>&1 | tee "$report/run.log"
rc=${PIPESTATUS[0]}
set -e
if [[ -n $publish && -s $report/results.json ]]; then
  mkdir -p "${publish%/*}"
  cp "$report/results.json" "$publish"
  # The raw evidence beside it: the run's JUnit report, from which results.json was read.
  gzip -9 -n -c "$report/junit_01.xml" >"${publish%.json}.junit.xml.gz"
  if (cd test/apiserver && GOWORK=off go run ./cmd/conformance-report --results ../../docs/conformance-results \
    --hack ../../hack/conformance --out ../../docs/conformance.md) >"$report/report.log" 2>&1; then
    msg="conformance: wrote $publish and docs/conformance.md"
    n=$(grep -c 'not explained' "$report/report.log" || true)
    ((n == 0)) || msg+="; $n failure(s) not explained in hack/conformance/explained.txt ($report/report.log)"
    echo "$msg" >&2
  else
    echo "conformance: wrote $publish; docs/conformance.md not generated: see $report/report.log" >&2
  fi
fi
# The run's result is the last line, as cluster-host printed it.
tail -n 1 "$report/run.log"
exit "$rc"

#!/usr/bin/env bash
# run.sh: make conformance (docs/conformance.md). Builds (or takes from .cache/) what the run
# needs: the cluster's binaries and images (hack/cluster/binaries.sh, images.sh), e2e.test,
# ginkgo and the suite's images (hack/conformance/build.sh), and with PROXY=kube-proxy
# kube-proxy's image (hack/cluster/kube-proxy-image.sh); then brings the one-node cluster up
# exactly as make cluster does (hack/cluster/run.sh conformance), deploys the proxy and CoreDNS,
# and runs e2e.test on the host against it. Its last line is
#   make conformance: N passed, M failed in T
# and it exits 0 only when no selected spec failed.
#
# Environment (make conformance passes its variables through):
#   SELECTION  services (default): the 15 [sig-network] Services [Conformance] specs;
#              sig-network: focus \[sig-network\], skip the terms of
#              hack/conformance/sig-network-skip.txt (each with its reason there)
#   FOCUS   ginkgo's focus, in place of the selection's (the selection is then "custom")
#   SKIP    ginkgo's skip, in place of the selection's
#   PROXY   kube-ipvs (default; deploy/ as shipped) or kube-proxy (v1.37 in IPVS mode)
#   PROCS   ginkgo's parallel processes (default 1)
#   REPORT  the report folder (default _output/conformance/SELECTION/PROXY): junit_01.xml, e2e.log and
#           results.json (per spec: passed, failed or skipped, seconds, the failure's first line)
#   CONFORMANCE_TIMEOUT  ginkgo's suite timeout (default 6h); GUEST_TIMEOUT (seconds) and
#           GUEST_MEM (MiB) of the node, default the suite timeout plus an hour, and 6144
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$repo"
export CLUSTER_T0=${CLUSTER_T0:-$(date +%s)}
proxy=${PROXY:-kube-ipvs}
selection=${SELECTION:-services}
case $selection in
services)
  focus='\[sig-network\] Services.*\[Conformance\]'
  skip=''
  ;;
sig-network)
  focus='\[sig-network\]'
  # One term per line, its reason after a tab; comments start with #.
  skip=$(grep -v '^#' hack/conformance/sig-network-skip.txt | cut -f1 | paste -sd'|')
  ;;
*) echo "conformance: SELECTION=$selection: want services or sig-network" >&2; exit 2 ;;
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

hack/deps.sh
start=$SECONDS
conf=$(hack/conformance/build.sh)
if [[ $proxy == kube-proxy ]]; then
  bin=$(hack/cluster/binaries.sh)
  CLUSTER_EXTRA_IMAGES=$(hack/cluster/kube-proxy-image.sh "$bin")
  export CLUSTER_EXTRA_IMAGES
fi
echo "conformance: e2e.test and its images ready after $((SECONDS - start))s" >&2
export CLUSTER_CONFORMANCE_IMAGES=$conf/images
# The node's memory; its lifetime (GUEST_TIMEOUT) is cluster-host's: the suite's timeout and
# an hour more for the bring-up.
export GUEST_MEM=${GUEST_MEM:-6144}
# What results.json (and the docs generated from it) quote as the command.
cmd="make conformance PROXY=$proxy"
if [[ $selection == custom ]]; then
  cmd+=" FOCUS='$focus'"
  [[ -z $skip ]] || cmd+=" SKIP='$skip'"
elif [[ $selection != services ]]; then
  cmd+=" SELECTION=$selection"
fi
[[ $procs == 1 ]] || cmd+=" PROCS=$procs"
export CONFORMANCE_COMMAND=$cmd
mkdir -p "$report"
args=(--conformance "$conf" --report "$report" --proxy "$proxy" --focus "$focus" --procs "$procs"
  --timeout "$timeout")
[[ -z $skip ]] || args+=(--skip "$skip")
exec hack/cluster/run.sh conformance "${args[@]}"

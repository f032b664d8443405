#!/usr/bin/env bash
# run.sh: make sli (docs/sli.md). The network programming latency SLI of the proxy on the
# real node(s) of make cluster, under a load modelled on ClusterLoader2's load test whose Pods
# live on fake nodes that kwok runs on the host. Builds (or takes from .cache/) kwok
# (hack/sli/kwok.sh) and what make cluster needs, then runs hack/cluster/run.sh sli. Its last
# line is
#   sli: PROXY N Services, K nodes: p50 A s, p90 B s, p99 C s over M changes
# and the run's sli.json (its settings, phases and figures) is in REPORT.
#
# Environment (make sli passes its variables through):
#   SERVICES    Services, each with a Deployment (default 10000); every fifth is a NodePort
#   REPLICAS    Pods per Deployment (default 5)
#   FAKE_NODES  kwok's nodes, 110 Pods each at most (default 500)
#   CHURN       how long the measured churn lasts, a Go duration (default 10m)
#   PROXY       kube-ipvs (default; deploy/ as shipped) or kube-proxy (v1.37 in IPVS mode)
#   NODES       real nodes running the proxy (default 1)
#   REPORT      the report folder (default _output/sli/PROXY-SERVICES)
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$repo"
export CLUSTER_T0=${CLUSTER_T0:-$(date +%s)}
proxy=${PROXY:-kube-ipvs}
services=${SERVICES:-10000}
report=${REPORT:-_output/sli/$proxy-$services}
load=(--services "$services")
[[ -z ${REPLICAS:-} ]] || load+=(--replicas "$REPLICAS")
[[ -z ${FAKE_NODES:-} ]] || load+=(--fake-nodes "$FAKE_NODES")
[[ -z ${CHURN:-} ]] || load+=(--churn "$CHURN")
# Bad settings stop the run before anything is built.
tools=$(mktemp -d "${TMPDIR:-/tmp}/kipvs-sli-tools.XXXXXX")
trap 'rm -rf "$tools"' EXIT
(cd test/apiserver && GOWORK=off CGO_ENABLED=0 go build -trimpath -o "$tools/cluster-host" ./cmd/cluster-host)
"$tools/cluster-host" --checks sli-validate --nodes "${NODES:-1}" "${load[@]}" || exit 2
mkdir -p "$report"
kwok=$(hack/sli/kwok.sh)
args=(--kwok "$kwok" --kwok-stages "$repo/hack/sli/kwok-stages.yaml" --report "$report" "${load[@]}")
hack/cluster/run.sh sli "${args[@]}" 2>&1 | tee "$report/run.log"
exit "${PIPESTATUS[0]}"

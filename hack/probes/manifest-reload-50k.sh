#!/usr/bin/env bash
# GUEST_MEM=4096 GUEST_TIMEOUT=5400 make guest-run SCRIPT=hack/probes/manifest-reload-50k.sh
# (a copy with N set to 3000 is a quick run: the guest does not get the host's environment)
#
# A probe, not a test: kube-ipvs on --manifests in a network namespace of its own; one
# SIGHUP reload adds N Services (default 50,000), each with one EndpointSlice, and a second
# removes them. It reports the time to parse each reload, the time until IPVS shows it, and
# the proxy's peak RSS, and diffs the namespace's kernel state (IPVS, ipsets, kube-ipvs0's
# addresses, kube-ipvs' iptables chains) before the first reload and after the second:
# they must be identical. BENCHMARKS.md quotes it.
set -euo pipefail
n=${N:-50000}
poll=1 # seconds between IPVS listings; each takes the kernel's IPVS mutex, as the proxy's writes do
((n < 10000)) || poll=5
ns=kp
dir=$(mktemp -d)
out=$(mktemp -d)
trap 'kill "${pid:-}" 2>/dev/null || true; wait "${pid:-}" 2>/dev/null || true; ip netns del "$ns" 2>/dev/null || true' EXIT
nsx() { ip netns exec "$ns" "$@"; }
since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'; }
vses() { nsx ipvsadm -Ln | grep -c '^TCP' || true; }
loads() { grep -c 'msg="manifests loaded"' "$out/log" || true; }

# state dumps what the reloads must leave as they found it (state.raw keeps the sets as
# listed). Not state: chain packet counts, and of an ipset its "Size in memory" and the
# hashsize in its header. The kernel never shrinks a hash set: the buckets a set grew for
# thousands of members stay allocated after they go (at N=3000 only "Size in memory"
# differed, 240 -> 440 bytes for a set of one member). Members, "Number of entries",
# maxelem and the type are kept.
state() {
  echo "== ipvsadm -Ln"
  nsx ipvsadm -Ln
  echo "== ipset list"
  nsx ipset list | tee "$1.raw" | grep -v '^Size in memory:' | sed -E 's/ hashsize [0-9]+ / hashsize - /'
  echo "== kube-ipvs0"
  nsx ip -o addr show dev kube-ipvs0 | awk '{ print $3, $4 }' | sort
  for t in iptables ip6tables; do
    echo "== $t-save"
    # Each chain and rule of kube-ipvs (KIPVS-*, and the jumps it comments), by table.
    nsx "$t-save" | awk '/^\*/ { table = $1 } /KIPVS|kube-ipvs/ { print table, $0 }' |
      sed -E 's/ \[[0-9]+:[0-9]+\]$//' | sort
  done
}

ip netns add "$ns"
nsx ip link set lo up
nsx ip link add eth0 type dummy
nsx ip addr add 203.0.113.10/24 dev eth0
nsx ip link set eth0 up
nsx sysctl -qw net.ipv4.ip_forward=1

cat >"$dir/base.yaml" <<'YAML'
apiVersion: v1
kind: Node
metadata: {name: node-p}
---
apiVersion: v1
kind: Service
metadata: {name: base, namespace: default}
spec: {clusterIP: 10.96.0.10, ports: [{name: http, port: 80, targetPort: 8080}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: base-1, namespace: default, labels: {kubernetes.io/service-name: base}}
addressType: IPv4
ports: [{name: http, port: 8080, protocol: TCP}]
endpoints: [{addresses: [10.244.0.10]}]
YAML

ip netns exec "$ns" kube-ipvs run --manifests "$dir" --hostname-override node-p --lock-file "" \
  --metrics-bind-address "" --healthz-bind-address "" --log-level info >"$out/log" 2>&1 &
pid=$!
until [ "$(vses)" = 1 ]; do
  kill -0 "$pid" || { cat "$out/log"; exit 1; }
  sleep 1
done
sleep 5 # the first repair's firewall and sets settle
state "$out/before" >"$out/before"

# The N Services: one ClusterIP and port 80 each, one ready endpoint.
awk -v n="$n" 'BEGIN {
  for (i = 0; i < n; i++) {
    a = int(i / 250); b = i % 250 + 1
    printf "apiVersion: v1\nkind: Service\nmetadata: {name: s%d, namespace: default}\n", i
    printf "spec: {clusterIP: 10.%d.%d.%d, ports: [{name: http, port: 80, targetPort: 8080}]}\n---\n", 100 + int(a / 256), a % 256, b
    printf "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\n"
    printf "metadata: {name: s%d-1, namespace: default, labels: {kubernetes.io/service-name: s%d}}\n", i, i
    printf "addressType: IPv4\nports: [{name: http, port: 8080, protocol: TCP}]\n"
    printf "endpoints: [{addresses: [10.%d.%d.%d]}]\n---\n", 200 + int(a / 256), a % 256, b
  }
}' >"$dir/bulk.yaml"

# reload WANT-VSES: one SIGHUP, then the time until it is parsed and applied (the log's
# "manifests loaded") and until IPVS holds WANT-VSES virtual servers.
reload() {
  local before start
  before=$(loads)
  start=$EPOCHREALTIME
  kill -HUP "$pid"
  until [ "$(loads)" -gt "$before" ]; do kill -0 "$pid"; sleep 0.5; done
  parsed=$(since "$start")
  until [ "$(vses)" = "$1" ]; do kill -0 "$pid"; sleep "$poll"; done
  ipvs=$(since "$start")
}
reload $((n + 1))
echo "add $n Services: parsed and applied in ${parsed} s, in IPVS after ${ipvs} s"
grep 'msg="manifests loaded"' "$out/log" | tail -1
rm "$dir/bulk.yaml"
reload 1
echo "remove them: parsed and applied in ${parsed} s, IPVS back to 1 virtual server after ${ipvs} s"
echo "kube-ipvs $(grep -E '^VmHWM' /proc/$pid/status)"

# The firewall and sets follow through incremental syncs and the next repair: wait until
# the state matches or three minutes pass, then show any difference.
for _ in $(seq 180); do
  state "$out/after" >"$out/after"
  cmp -s "$out/before" "$out/after" && break
  sleep 1
done
kill -0 "$pid" || { echo "kube-ipvs is no longer running"; tail -50 "$out/log"; exit 1; }
if diff -u "$out/before" "$out/after"; then
  echo "kernel state after the two reloads: identical to before ($(wc -l <"$out/before") lines)"
  echo "what the comparison leaves out, as listed:"
  diff "$out/before.raw" "$out/after.raw" | grep -E '^[<>]' || echo "(nothing)"
else
  echo "kernel state after the two reloads DIFFERS from before"
  exit 1
fi

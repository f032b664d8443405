#!/usr/bin/env bash
# make guest-run SCRIPT=hack/probes/vip-binding.sh
#
# A probe, not a test: how long the guest kernel takes to make 20,000 VIPs local as
# addresses of a dummy link (what kube-ipvs and kube-proxy's IPVS mode do) and as local
# routes through it, and whether IPVS serves a VIP that only a local route makes local
# (from a pod namespace and from the node). BENCHMARKS.md quotes it. Everything happens
# in namespaces it creates and deletes.
set -euo pipefail
n=${N:-20000}
gen() { # gen VERB SUFFIX: one ip-batch line per VIP
  for ((k = 0; k < n; k++)); do
    printf '%s 10.%d.%d.%d/32 dev d0%s\n' "$1" $((96 + (k >> 16))) $(((k >> 8) & 255)) $((k & 255)) "$2"
  done
}
gen "addr add" "" >/tmp/addrs.batch
gen "route add local" " table local" >/tmp/routes.batch
trap 'ip netns del probe 2>/dev/null || true' EXIT
for what in addrs routes; do
  ip netns add probe
  ip netns exec probe ip link add d0 type dummy
  ip netns exec probe ip link set d0 up
  start=$EPOCHREALTIME
  ip netns exec probe ip -batch "/tmp/$what.batch"
  echo "$what: $n in $(awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }') s"
  ip netns del probe
done

# A pod namespace c and a backend namespace b hang off the node namespace x by veth pairs.
ip netns add x
ip netns add c
ip netns add b
trap 'kill "${server:-}" 2>/dev/null || true; for ns in x c b; do ip netns del "$ns" 2>/dev/null || true; done' EXIT
ip netns exec x sysctl -qw net.ipv4.ip_forward=1 net.ipv4.vs.conntrack=1
ip netns exec x ip link add d0 type dummy
ip netns exec x ip link set d0 up
ip netns exec x ip route add local 10.96.0.1/32 dev d0 table local
for p in c b; do
  ip link add "$p-x" netns x type veth peer name eth0 netns "$p"
done
setup() { # setup NS NODE-SIDE-IP/24 NS-IP/24
  ip netns exec x ip addr add "$2" dev "$1-x"
  ip netns exec x ip link set "$1-x" up
  ip netns exec "$1" ip addr add "$3" dev eth0
  ip netns exec "$1" ip link set eth0 up
  ip netns exec "$1" ip link set lo up
  ip netns exec "$1" ip route add default via "${2%/*}"
}
setup c 10.244.1.1/24 10.244.1.2/24
setup b 10.244.0.1/24 10.244.0.2/24
ip netns exec b kipvs-echo serve --name backend --tcp 8080 &
server=$!
ip netns exec x ipvsadm -A -t 10.96.0.1:80 -s rr
ip netns exec x ipvsadm -a -t 10.96.0.1:80 -r 10.244.0.2:8080 -m
for _ in $(seq 50); do ip netns exec b kipvs-echo ask --timeout 1s 127.0.0.1:8080 >/dev/null 2>&1 && break; sleep 0.1; done
echo "pod -> VIP local by a route only: $(ip netns exec c kipvs-echo ask --timeout 3s 10.96.0.1:80 2>&1)"
echo "node -> VIP local by a route only: $(ip netns exec x kipvs-echo ask --timeout 3s 10.96.0.1:80 2>&1)"
echo "IPv4 addresses on d0: $(ip netns exec x ip -4 addr show dev d0 | grep -c inet || true)"

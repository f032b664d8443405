#!/usr/bin/env bash
# guest-prepare: hack/parity/prepare.sh
#
# make parity: kube-proxy v1.37's own IPVS proxier and kube-ipvs get the same Services,
# EndpointSlices and Node (manifests/) in two network namespaces of one guest, each a node
# with the same addresses. Both sync once and exit, leaving their rules; then each
# namespace's IPVS table, kube-ipvs0 addresses and ipset entries are normalised and diffed
# (paritydiff). The diff must equal expected.txt line for line: every known difference is
# listed there and explained in docs/differences-from-kube-proxy.md, so a new one fails.
# D2 is also checked with a pod's connection in each namespace.
set -euo pipefail
bin=/payload/prepared
out=/tmp/parity
node_ips=(192.0.2.10/24 2001:db8::10/64)
args=(--manifests manifests --hostname-override parity-node --cluster-cidr 10.244.0.0/16,fd00:10:244::/48)

fail() {
  echo "FAIL: $*" >&2
  for f in "$out"/*.log; do [[ -f $f ]] && { echo "--- $f (last 40 lines)" >&2; tail -n 40 "$f" >&2; }; done
  exit 1
}

# node NS: a network namespace standing for the node: loopback, and eth0 (a dummy) with the
# node's addresses and default routes, as on a real node.
node() {
  ip netns add "$1"
  ip -n "$1" link set lo up
  ip -n "$1" link add eth0 type dummy
  ip -n "$1" addr add "${node_ips[0]}" dev eth0
  ip -n "$1" addr add "${node_ips[1]}" dev eth0 nodad
  ip -n "$1" link set eth0 up
  ip -n "$1" route add default dev eth0
  ip -n "$1" -6 route add default dev eth0
}

# dump NS DIR: what paritydiff compares, plus iptables-save for whoever reads a failure.
dump() {
  mkdir -p "$2"
  ip netns exec "$1" ipvsadm -Sn >"$2/ipvs.txt"
  ip -n "$1" -o addr show dev kube-ipvs0 >"$2/addrs.txt"
  ip netns exec "$1" ipset save >"$2/sets.txt"
  ip netns exec "$1" iptables-save >"$2/iptables.txt"
  grep -q . "$2/ipvs.txt" || fail "$1 programmed no virtual server"
}

# pod NODE-NS: a pod (10.244.1.50, this node's pod range) in that node namespace, routed as
# Calico does it: its /32 on eth0, the gateway 169.254.1.1 on the node's end of the veth.
pod() {
  ip netns add "p$1"
  ip -n "$1" link add vpod type veth peer name eth0 netns "p$1"
  ip -n "$1" addr add 169.254.1.1/32 dev vpod
  ip -n "$1" link set vpod up
  ip -n "$1" route add 10.244.1.50/32 dev vpod
  ip netns exec "$1" sh -c 'echo 1 >/proc/sys/net/ipv4/ip_forward'
  ip -n "p$1" link set lo up
  ip -n "p$1" addr add 10.244.1.50/32 dev eth0
  ip -n "p$1" link set eth0 up
  ip -n "p$1" route add 169.254.1.1 dev eth0 scope link
  ip -n "p$1" route add default via 169.254.1.1 dev eth0
}

# connect POD ADDR PORT: exit status of one TCP connect from the pod, 3 s at most (124: no
# answer, 1: refused).
connect() {
  local rc=0
  ip netns exec "$1" timeout 3 bash -c "exec 3<>/dev/tcp/$2/$3" >/dev/null 2>&1 || rc=$?
  echo "$rc"
}

mkdir -p "$out"
node kp
node ki
start=$SECONDS
ip netns exec kp "$bin/kube-proxy-ipvs" --once --node-ip 192.0.2.10,2001:db8::10 "${args[@]}" \
  >"$out/kube-proxy.log" 2>&1 || fail "kube-proxy's IPVS proxier did not sync"
echo "=== kube-proxy synced in $((SECONDS - start))s"
start=$SECONDS
ip netns exec ki kube-ipvs run --once --mode ipvs --healthz-bind-address "" --metrics-bind-address "" \
  "${args[@]}" >"$out/kube-ipvs.log" 2>&1 || fail "kube-ipvs did not sync"
echo "=== kube-ipvs synced in $((SECONDS - start))s"
grep -qw parity.show=1 /proc/cmdline && { echo "--- kube-proxy log"; cat "$out/kube-proxy.log"; }
dump kp "$out/kube-proxy"
dump ki "$out/kube-ipvs"
if grep -qw parity.show=1 /proc/cmdline; then
  for side in kube-proxy kube-ipvs; do
    for f in ipvs addrs sets; do echo "--- $side $f.txt"; cat "$out/$side/$f.txt"; done
  done
fi

"$bin/paritydiff" "$out/kube-proxy" "$out/kube-ipvs" >"$out/diff.txt"
echo "=== normalised differences (- kube-proxy only, + kube-ipvs only): $(wc -l <"$out/diff.txt")"
cat "$out/diff.txt"
grep -v -e '^#' -e '^$' expected.txt | LC_ALL=C sort >"$out/expected.sorted"
LC_ALL=C sort "$out/diff.txt" >"$out/diff.sorted"
if ! diff -u "$out/expected.sorted" "$out/diff.sorted" >"$out/unexpected.txt"; then
  echo "=== the differences are not the documented ones (diff expected.txt -> got):" >&2
  cat "$out/unexpected.txt" >&2
  fail "parity changed: fix the product, or update expected.txt and docs/differences-from-kube-proxy.md"
fi

# D2 with real packets: a pod on this node connecting to the load-balancer IP of an
# externalTrafficPolicy Local Service whose only endpoint is on another node. Both proxies
# schedule it to that endpoint (their IPVS connection tables name it; the endpoint does not
# exist here, so the connect itself times out): kube-proxy through the address virtual
# server, kube-ipvs through its firewall-mark one (the address one stays empty).
pod kp
pod ki
for side in kp ki; do
  connect "p$side" 198.51.100.13 80 >/dev/null
  ip netns exec "$side" ipvsadm -Lnc | grep -Eq '198\.51\.100\.13:80 +10\.244\.2\.11:8080' ||
    fail "D2 changed: $side did not send the pod to the remote endpoint: $(ip netns exec "$side" ipvsadm -Lnc)"
done
echo "=== D2 with traffic: both proxies send the pod to 10.244.2.11"

# The comparison itself can fail: one virtual server dropped from kube-ipvs's table must
# show as a new difference.
cp -r "$out/kube-ipvs" "$out/mutant"
grep -v -- '-A -t 10.96.0.10:80 ' "$out/kube-ipvs/ipvs.txt" >"$out/mutant/ipvs.txt"
"$bin/paritydiff" "$out/kube-proxy" "$out/mutant" >"$out/mutant.txt"
grep -qx -- '- ipvs -t 10.96.0.10:80 -s rr' "$out/mutant.txt" ||
  fail "paritydiff did not notice a virtual server missing from kube-ipvs's table"
echo "PASS: the $(wc -l <"$out/diff.txt") differences are exactly the documented ones"

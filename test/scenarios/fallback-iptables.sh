#!/usr/bin/env bash
# guest-append: kipvs.nopreload
#
# A node where IPVS cannot work (ip_vs blocked): `run --mode=ipvs` refuses to start,
# `run --mode=auto` falls back to the iptables proxier loudly (log, Node Event, metric), and
# the core traffic scenarios pass in iptables mode: ClusterIP, NodePort, UDP, ClientIP
# affinity, endpoint changes, externalTrafficPolicy=Local keeping the client IP, a REJECT for
# a Service without endpoints, a random spread over three backends, and a UDP flow (one
# source port) moving off a removed endpoint (its conntrack entry cleared).
set -euo pipefail
source ./lib/pods.sh

fail() {
  echo "FAIL: $*" >&2
  [[ -f /tmp/kipvs.log ]] && { echo "--- kube-ipvs log:" >&2; cat /tmp/kipvs.log >&2; }
  exit 1
}
step() { echo "=== $*"; }

mkdir -p /etc/modprobe.d
echo 'install ip_vs false' >/etc/modprobe.d/kipvs-block.conf
echo 1 >/proc/sys/net/ipv4/ip_forward
ip link add node0 type dummy
ip addr add 203.0.113.10/24 dev node0
ip link set node0 up
# A node has a default route; without one, packets to a VIP with no DNAT (a Service without
# endpoints) would be refused by routing before the filter table's REJECT could answer.
ip route add default dev node0

for i in 1 2 3; do
  mkpod "b$i" "10.244.1.1$i"
  inpod "b$i" kipvs-echo serve --name "b$i" --tcp 8080 --udp 5353 &
done
inpod b1 kipvs-echo serve --name b1 --tcp 8081 --who &
mkpod c1 10.244.2.1
mkpod c2 10.244.2.2
mkpod ext 198.18.0.7

mkdir -p m
svc() { # svc NAME IP [extra spec lines]
  cat <<YAML
apiVersion: v1
kind: Service
metadata: {name: $1, namespace: fb, annotations: {kube-ipvs.io/scheduler: ${SCHED:-rr}}}
spec:
  clusterIP: $2
  clusterIPs: [$2]
$3
---
YAML
}
slice() { # slice SVC PROTO PORT IP...
  local s=$1 proto=$2 port=$3
  shift 3
  printf 'apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: %s-1, namespace: fb, labels: {kubernetes.io/service-name: %s}}\naddressType: IPv4\nports: [{name: p, protocol: %s, port: %s}]\nendpoints:\n' "$s" "$s" "$proto" "$port"
  for ip in "$@"; do printf -- '- {addresses: ["%s"], conditions: {ready: true}, nodeName: fb-node}\n' "$ip"; done
  echo ---
}
write_manifests() { # write_manifests WEB-ENDPOINTS...
  {
    printf 'apiVersion: v1\nkind: Node\nmetadata: {name: fb-node}\n---\n'
    svc web 10.96.0.10 "  ports: [{name: p, protocol: TCP, port: 80, targetPort: 8080}]"
    slice web TCP 8080 "$@"
    svc np 10.96.0.11 "  type: NodePort
  ports: [{name: p, protocol: TCP, port: 80, targetPort: 8080, nodePort: 30080}]"
    slice np TCP 8080 10.244.1.11 10.244.1.12 10.244.1.13
    svc local 10.96.0.12 "  type: NodePort
  externalTrafficPolicy: Local
  ports: [{name: p, protocol: TCP, port: 80, targetPort: 8081, nodePort: 30081}]"
    slice local TCP 8081 10.244.1.11
    svc dns 10.96.0.53 "  ports: [{name: p, protocol: UDP, port: 53, targetPort: 5353}]"
    slice dns UDP 5353 10.244.1.11 10.244.1.12 10.244.1.13
    svc flow 10.96.0.54 "  ports: [{name: p, protocol: UDP, port: 53, targetPort: 5353}]"
    slice flow UDP 5353 "${FLOW_EP:-10.244.1.11}"
    svc sticky 10.96.0.20 "  sessionAffinity: ClientIP
  sessionAffinityConfig: {clientIP: {timeoutSeconds: 300}}
  ports: [{name: p, protocol: TCP, port: 80, targetPort: 8080}]"
    slice sticky TCP 8080 10.244.1.11 10.244.1.12 10.244.1.13
    svc empty 10.96.0.30 "  ports: [{name: p, protocol: TCP, port: 80, targetPort: 8080}]"
  } >m/all.yaml
}
write_manifests 10.244.1.11 10.244.1.12 10.244.1.13

step "--mode=ipvs refuses to run without IPVS"
set +e
kube-ipvs run --mode=ipvs --once --manifests m --hostname-override fb-node >/tmp/ipvs.out 2>&1
rc=$?
set -e
cat /tmp/ipvs.out
[[ $rc != 0 ]] || fail "--mode=ipvs exited 0 on a node without IPVS"
grep -q "ip_vs" /tmp/ipvs.out || fail "--mode=ipvs did not print the preflight table"

step "--mode=auto falls back to iptables, loudly"
kube-ipvs run --mode=auto --manifests m --hostname-override fb-node --cluster-cidr 10.244.0.0/16 >/tmp/kipvs.log 2>&1 &
proxy=$!
trap 'kill $proxy 2>/dev/null || true' EXIT
wait_for 60 inpod c1 kipvs-echo ask 10.96.0.10:80 || fail "no traffic through the ClusterIP in iptables mode"
grep -q "FALLING BACK TO THE IPTABLES PROXIER" /tmp/kipvs.log || fail "no fallback warning in the log"
grep -q 'reason=IPVSUnavailable object="Node /fb-node"' /tmp/kipvs.log || fail "no IPVSUnavailable Event on the Node"
grep -q 'reason=SchedulerIgnored object="Service fb/web"' /tmp/kipvs.log || fail "no SchedulerIgnored Event for a Service asking for a scheduler"
metrics=$(exec 3<>/dev/tcp/127.0.0.1/10249 && printf 'GET /metrics HTTP/1.0\r\n\r\n' >&3 && cat <&3)
grep -q 'kube_ipvs_proxy_mode{mode="iptables"} 1' <<<"$metrics" || fail "the proxy_mode metric does not say iptables"
if ipvsadm -Ln 2>/dev/null | grep -q 10.96; then fail "IPVS virtual servers exist in iptables mode"; fi

step "ClusterIP: random spread over 3 backends, 300 requests, each 15%..55%"
out=$(inpod c1 kipvs-echo ask --count 300 --summary 10.96.0.10:80)
echo "$out"
for b in b1 b2 b3; do
  n=$(awk -v b="$b" '$1 == b {print $2}' <<<"$out")
  [[ -n $n ]] && ((n >= 45 && n <= 165)) || fail "backend $b answered ${n:-0} of 300"
done

step "NodePort from another namespace"
inpod c2 kipvs-echo ask --count 6 --summary 203.0.113.10:30080 | tee /tmp/np.out
[[ $(awk '{s += $2} END {print s}' /tmp/np.out) == 6 ]] || fail "NodePort answers"

step "UDP"
inpod c1 kipvs-echo ask --udp --count 9 --summary 10.96.0.53:53 | tee /tmp/udp.out
[[ $(awk '{s += $2} END {print s}' /tmp/udp.out) == 9 ]] || fail "UDP answers"

step "ClientIP affinity keeps one client on one backend"
[[ $(inpod c2 kipvs-echo ask --count 10 --summary 10.96.0.20:80 | wc -l) == 1 ]] || fail "affinity spread one client"

step "externalTrafficPolicy=Local keeps the client IP"
line=$(inpod ext kipvs-echo ask 203.0.113.10:30081)
echo "$line"
[[ $line == "b1 198.18.0.7" ]] || fail "eTP=Local answer '$line', want 'b1 198.18.0.7'"

step "no endpoints: REJECT, refused at once"
start=$SECONDS
if inpod c1 kipvs-echo ask --timeout 5s 10.96.0.30:80 2>/tmp/rej.err; then fail "a Service without endpoints answered"; fi
cat /tmp/rej.err
grep -q "refused" /tmp/rej.err || fail "not refused: $(cat /tmp/rej.err)"
((SECONDS - start < 4)) || fail "the reject took $((SECONDS - start))s: dropped, not rejected"

step "endpoint changes are followed"
write_manifests 10.244.1.13
kill -HUP $proxy
wait_for 20 sh -c '[ "$(ip netns exec c1 kipvs-echo ask --count 6 --summary 10.96.0.10:80 | awk "{print \$1}" | sort -u)" = "b3" ]' ||
  fail "traffic did not follow the endpoint change"

step "UDP: a flow to a removed endpoint is cleared, so the same source port reaches the new one"
first=$(inpod c1 kipvs-echo ask --udp --source-port 40053 10.96.0.54:53)
[[ $first == b1 ]] || fail "the UDP flow reached '$first', want b1"
FLOW_EP=10.244.1.12 write_manifests 10.244.1.13
kill -HUP $proxy
# Each ask refreshes the flow's conntrack entry: without the clearing it would keep reaching b1
# (still serving) for as long as this waits.
wait_for 20 sh -c '[ "$(ip netns exec c1 kipvs-echo ask --udp --source-port 40053 10.96.0.54:53)" = "b2" ]' ||
  fail "the flow from source port 40053 still reaches $(inpod c1 kipvs-echo ask --udp --source-port 40053 10.96.0.54:53): its conntrack entry was not cleared"
grep -q "cleared conntrack entries of a removed UDP endpoint" /tmp/kipvs.log || fail "no log line for the conntrack clearing"

echo "fallback-iptables: all checks passed"

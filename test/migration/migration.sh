#!/usr/bin/env bash
# guest-prepare: hack/parity/prepare.sh
#
# make migration: the migration and the rollback of docs/migration.md, step by step, on one
# node (a network namespace of the guest) with real traffic, each step checked as the doc
# says to check it.
#
#  1. kube-proxy v1.37's own IPVS proxier (the parity harness) programs a NodePort Service
#     (manifests/); two connections are held open through it, one to the ClusterIP, one to
#     the NodePort.
#  2. kube-proxy ends with SIGTERM and cleans nothing up (a DaemonSet's Pod going away).
#  3. `kube-ipvs run` on the same objects adopts what kube-proxy left: its first sync writes
#     nothing to IPVS or kube-ipvs0, the IPVS table and kube-ipvs0 are kube-proxy's.
#  4. `kube-ipvs cleanup --kube-proxy` while it runs: no KUBE-* chain, rule or ipset is left
#     in either family or iptables backend; after a periodic repair kube-ipvs' IPVS and
#     address write counters are still 0; both held connections carry data both ways after
#     every step, and new connections balance over both backends.
#  5. Rollback: kube-ipvs ends, `kube-ipvs cleanup` leaves no KIPVS-* chain, rule or set, no
#     virtual server and no kube-ipvs0; kube-proxy's iptables proxier takes over and new
#     connections reach both backends through its rules.
set -euo pipefail
source ./lib.sh
kube_proxy=/payload/prepared/kube-proxy-ipvs
objects=(--manifests manifests --hostname-override mig-node --cluster-cidr 10.244.0.0/16)
cluster=10.96.0.50:80
nodeport=192.0.2.10:30080
# Connections per balance check. rr alternates, so IPVS gives each backend half; kube-proxy's
# iptables rules pick at random (a backend getting fewer than 3 of 20: p < 0.0004).
n=20

mkdir -p "$out"
make_node
make_pod b1 10.244.1.11
make_pod b2 10.244.1.12
make_pod client 10.244.1.50
for b in b1 b2; do
  ip netns exec "$b" kipvs-echo serve --name "$b" --tcp 8080 >"$out/$b.log" 2>&1 &
done
wait_for 20 "backend b1 answering" ip netns exec client kipvs-echo ask 10.244.1.11:8080
wait_for 20 "backend b2 answering" ip netns exec client kipvs-echo ask 10.244.1.12:8080

echo "=== 1. kube-proxy's IPVS proxier programs the Service"
start=$SECONDS
ip netns exec node "$kube_proxy" --mode ipvs --node-ip 192.0.2.10,2001:db8::10 "${objects[@]}" >"$out/kube-proxy-ipvs.log" 2>&1 &
kp=$!
wait_for 180 "first full sync of kube-proxy (IPVS)" grep -qx synced "$out/kube-proxy-ipvs.log"
echo "kube-proxy (IPVS) synced in $((SECONDS - start)) s"
in_node ipvsadm -Sn | sort >"$out/ipvs.kube-proxy"
in_node ip -o addr show dev kube-ipvs0 | awk '{print $4}' | sort >"$out/addrs.kube-proxy"
cat "$out/ipvs.kube-proxy"
grep -q -- "-a -t $cluster -r 10.244.1.12:8080" "$out/ipvs.kube-proxy" || fail "kube-proxy did not program $cluster"
grep -q -- "-a -t $nodeport -r 10.244.1.11:8080" "$out/ipvs.kube-proxy" || fail "kube-proxy did not program $nodeport"
[[ -n $(rules_matching 'KUBE-SERVICES') && -n $(sets_matching '^KUBE-') ]] || fail "kube-proxy wrote no KUBE-* chain or set"
balanced "$cluster" "$n" $((n / 2)) "kube-proxy (IPVS)"
hold 1 "${cluster%:*}" "${cluster#*:}"
hold 2 "${nodeport%:*}" "${nodeport#*:}"

echo "=== 2. kube-proxy ends without cleaning up"
stop "$kp" "kube-proxy (IPVS)"
[[ $(in_node ipvsadm -Sn | sort) == "$(cat "$out/ipvs.kube-proxy")" ]] || fail "the IPVS table changed when kube-proxy ended"
exchange 1 "after kube-proxy ended"
exchange 2 "after kube-proxy ended"

echo "=== 3. kube-ipvs adopts what kube-proxy programmed"
ip netns exec node kube-ipvs run --mode ipvs "${objects[@]}" --sync-period 3s --healthz-bind-address "" \
  --metrics-bind-address 127.0.0.1:10249 >"$out/kube-ipvs.log" 2>&1 &
ki=$!
wait_for 120 "kube-ipvs' first sync" grep -q 'sync done' "$out/kube-ipvs.log"
grep 'sync done' "$out/kube-ipvs.log" | head -n 1
grep 'sync done' "$out/kube-ipvs.log" | head -n 1 | grep -q 'ipvs_writes=0 addr_writes=0' ||
  fail "kube-ipvs' first sync wrote to IPVS or kube-ipvs0"
# (No process substitution: the guest has no /dev/fd.)
in_node ipvsadm -Sn | sort >"$out/ipvs.kube-ipvs"
in_node ip -o addr show dev kube-ipvs0 | awk '{print $4}' | sort >"$out/addrs.kube-ipvs"
diff -u "$out/ipvs.kube-proxy" "$out/ipvs.kube-ipvs" || fail "the IPVS table is not the one kube-proxy left"
diff -u "$out/addrs.kube-proxy" "$out/addrs.kube-ipvs" || fail "kube-ipvs0's addresses are not the ones kube-proxy left"
grep 'sync done' "$out/kube-ipvs.log" | head -n 1 | grep -q 'virtual_servers=2 ' ||
  fail "kube-ipvs does not own exactly the ClusterIP and 192.0.2.10 NodePort virtual servers"
[[ -n $(rules_matching 'KIPVS-SERVICES') && -n $(sets_matching '^KIPVS-') ]] || fail "kube-ipvs wrote no KIPVS-* chain or set"
exchange 1 "under kube-ipvs"
exchange 2 "under kube-ipvs"

echo "=== 4. kube-ipvs cleanup --kube-proxy, with kube-ipvs running"
in_node kube-ipvs cleanup --kube-proxy >"$out/cleanup-kube-proxy.txt" 2>&1 ||
  fail "cleanup --kube-proxy exited $?: $(cat "$out/cleanup-kube-proxy.txt")"
echo "cleanup --kube-proxy: $(grep -c '^removed ' "$out/cleanup-kube-proxy.txt") objects removed"
left=$(rules_matching 'KUBE-'; sets_matching '^KUBE-')
[[ -z $left ]] || fail "kube-proxy's objects left after cleanup --kube-proxy:"$'\n'"$left"
again=$(in_node kube-ipvs cleanup --kube-proxy --dry-run 2>&1) || fail "a second --kube-proxy dry run failed: $again"
[[ $again == "nothing to remove" ]] || fail "a second --kube-proxy dry run finds more:"$'\n'"$again"
exchange 1 "after cleanup --kube-proxy"
exchange 2 "after cleanup --kube-proxy"
# A periodic repair after the cleanup: kube-ipvs still finds nothing to write in IPVS.
repairs=$(grep -c 'sync done.*full=true' "$out/kube-ipvs.log")
wait_for 60 "a periodic repair after the cleanup" eval '(( $(grep -c "sync done.*full=true" "$out/kube-ipvs.log") > repairs ))'
ipvs_writes=$(metric kube_ipvs_netlink_writes_total 'subsystem="ipvs"')
addr_writes=$(metric kube_ipvs_netlink_writes_total 'subsystem="address"')
set_writes=$(metric kube_ipvs_netlink_writes_total 'subsystem="ipset"')
echo "kube-ipvs netlink writes since it started: ipvs=$ipvs_writes address=$addr_writes ipset=$set_writes"
((set_writes > 0)) || fail "no ipset write in kube-ipvs' metrics: the metrics are not being read"
((ipvs_writes == 0 && addr_writes == 0)) || fail "kube-ipvs wrote to IPVS ($ipvs_writes) or kube-ipvs0 ($addr_writes)"
in_node ipvsadm -Sn | sort | diff -u "$out/ipvs.kube-proxy" - || fail "the IPVS table changed"
balanced "$cluster" "$n" $((n / 2)) "kube-ipvs"
balanced "$nodeport" "$n" $((n / 2)) "kube-ipvs"
exchange 1 "after new connections"
exchange 2 "after new connections"

echo "=== 5. rollback: kube-ipvs cleanup, then kube-proxy's iptables proxier"
stop "$ki" "kube-ipvs"
in_node kube-ipvs cleanup >"$out/cleanup.txt" 2>&1 || fail "cleanup exited $?: $(cat "$out/cleanup.txt")"
echo "cleanup: $(grep -c '^removed ' "$out/cleanup.txt") objects removed"
# The one virtual server left is kube-proxy's NodePort on the pods' link-local gateway
# address, which kube-ipvs never programs nor owns (docs/differences-from-kube-proxy.md, D5).
left=$(rules_matching 'KIPVS-'; sets_matching '^KIPVS-'; in_node ipvsadm -Sn | grep -v -- '-t 169\.254\.1\.1:30080 ' || true)
[[ -z $left ]] || fail "left after kube-ipvs cleanup:"$'\n'"$left"
in_node ipvsadm -Sn | grep -q -- '-A -t 169\.254\.1\.1:30080 ' || fail "kube-proxy's link-local NodePort is gone: D5 changed"
! in_node ip link show kube-ipvs0 >/dev/null 2>&1 || fail "kube-ipvs0 is left after cleanup"
start=$SECONDS
ip netns exec node "$kube_proxy" --mode iptables --node-ip 192.0.2.10,2001:db8::10 "${objects[@]}" >"$out/kube-proxy-iptables.log" 2>&1 &
kp=$!
wait_for 180 "first full sync of kube-proxy (iptables)" grep -qx synced "$out/kube-proxy-iptables.log"
echo "kube-proxy (iptables) synced in $((SECONDS - start)) s"
[[ -n $(rules_matching '^-A KUBE-SVC-.* -j KUBE-SEP-') ]] || fail "kube-proxy's iptables proxier wrote no Service chain"
in_node ipvsadm -D -t 169.254.1.1:30080 # D5: the operator's manual step
[[ -z $(in_node ipvsadm -Sn) ]] || fail "a virtual server appeared under kube-proxy's iptables mode"
balanced "$cluster" "$n" 3 "kube-proxy (iptables)"
balanced "$nodeport" "$n" 3 "kube-proxy (iptables)"
stop "$kp" "kube-proxy (iptables)"
echo "PASS: migrated from kube-proxy's IPVS mode with two held connections and no IPVS write, and rolled back to its iptables mode"

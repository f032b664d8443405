#!/usr/bin/env bash
# make migration, second part: why docs/migration.md runs `kube-ipvs cleanup --kube-proxy`
# only once kube-ipvs runs on the node. The kernel tracks connections in a network
# namespace only while some rule there needs conntrack (a MASQUERADE target, a conntrack
# match); NAT of an established connection is applied through its conntrack entry. When
# kube-proxy's rules were the last such users and go, the entries stay but the namespace's
# packets are no longer tracked, so a masqueraded connection through IPVS (a NodePort
# here) loses its source NAT and the backend resets it. With any other conntrack user in
# place (kube-ipvs' own rules, kubelet's KUBE-FIREWALL, a CNI's rules) it survives.
#
# kube-proxy's masquerade rules are written here as kube-proxy's IPVS mode writes them
# (KUBE-MARK-MASQ on a NodePort set match, KUBE-POSTROUTING), with iptables-nft.
set -euo pipefail
source ./lib.sh
nodeport=192.0.2.10:30080

# kube_proxy_rules add|remove: kube-proxy's NodePort masquerade rules; remove does what
# cleanup --kube-proxy does (the jumps, then the chains), and destroys the set.
kube_proxy_rules() {
  if [[ $1 == add ]]; then
    in_node ipset create KUBE-NODE-PORT-TCP bitmap:port range 0-65535
    in_node ipset add KUBE-NODE-PORT-TCP 30080
    in_node iptables-nft-restore --noflush <<'EOF'
*nat
:KUBE-SERVICES - [0:0]
:KUBE-NODE-PORT - [0:0]
:KUBE-MARK-MASQ - [0:0]
:KUBE-POSTROUTING - [0:0]
-A PREROUTING -j KUBE-SERVICES
-A POSTROUTING -j KUBE-POSTROUTING
-A KUBE-SERVICES -m addrtype --dst-type LOCAL -j KUBE-NODE-PORT
-A KUBE-NODE-PORT -p tcp -m set --match-set KUBE-NODE-PORT-TCP dst -j KUBE-MARK-MASQ
-A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000
-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN
-A KUBE-POSTROUTING -j MARK --set-xmark 0x4000/0x0
-A KUBE-POSTROUTING -j MASQUERADE --random-fully
COMMIT
EOF
    return
  fi
  in_node iptables-nft -t nat -D PREROUTING -j KUBE-SERVICES
  in_node iptables-nft -t nat -D POSTROUTING -j KUBE-POSTROUTING
  for c in KUBE-SERVICES KUBE-NODE-PORT KUBE-MARK-MASQ KUBE-POSTROUTING; do in_node iptables-nft -t nat -F "$c"; done
  for c in KUBE-SERVICES KUBE-NODE-PORT KUBE-MARK-MASQ KUBE-POSTROUTING; do in_node iptables-nft -t nat -X "$c"; done
  in_node ipset destroy KUBE-NODE-PORT-TCP
}

# masqueraded ID: held connection ID reached the backend from the node's address (its
# conntrack entry has the source NAT).
masqueraded() {
  local sport
  sport=$(in_node conntrack -L -p tcp --dport 30080 2>/dev/null | grep -c 'dst=169.254.1.1') || true
  ((sport >= $1)) || fail "held connection $1 was not masqueraded: $(in_node conntrack -L -p tcp --dport 30080 2>&1)"
}

mkdir -p "$out"
make_node
make_pod b1 10.244.1.11
make_pod client 10.244.1.50
ip netns exec b1 kipvs-echo serve --name b1 --tcp 8080 >"$out/b1.log" 2>&1 &
wait_for 20 "backend b1 answering" ip netns exec client kipvs-echo ask 10.244.1.11:8080
in_node sh -c 'echo 1 >/proc/sys/net/ipv4/vs/conntrack'
in_node ipvsadm -A -t "$nodeport" -s rr
in_node ipvsadm -a -t "$nodeport" -r 10.244.1.11:8080 -m

echo "=== kube-proxy's rules are the only conntrack users"
kube_proxy_rules add
hold 1 "${nodeport%:*}" "${nodeport#*:}"
masqueraded 1
exchange 1 "with kube-proxy's rules"
kube_proxy_rules remove
if answer=$(ask_held 1); then
  fail "the masqueraded connection survived the removal of the last conntrack user (answered $answer): docs/migration.md's order is then not needed"
fi
echo "held connection 1 is reset once kube-proxy's rules, the last conntrack users, are gone"

echo "=== another rule uses conntrack (as kube-ipvs' rules, kubelet's or a CNI's do)"
in_node iptables-nft -A INPUT -m conntrack --ctstate INVALID -j DROP
kube_proxy_rules add
hold 2 "${nodeport%:*}" "${nodeport#*:}"
masqueraded 2
exchange 2 "with kube-proxy's rules"
kube_proxy_rules remove
exchange 2 "after kube-proxy's rules are removed"
echo "PASS: a masqueraded connection survives the removal of kube-proxy's rules only while another rule uses conntrack"

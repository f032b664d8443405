#!/usr/bin/env bash
# Prints the host's own network state: addresses, links, routes, rules, firewall and ipsets.
# make test prints it before and after the tests and fails if it changed: tests may program
# only namespaces they create and the guest, never the host itself.
set -u
export LC_ALL=C
ip -o link show 2>&1 | sed -E 's/ (qlen|state) [^ ]+//g'
ip -o addr show 2>&1 | sed -E 's/ (valid_lft|preferred_lft) [^ ]+//g'
ip route show table all 2>&1
ip -6 route show table all 2>&1 | sed -E 's/ expires [^ ]+//'
ip rule show 2>&1
ip -6 rule show 2>&1
for t in iptables-legacy-save iptables-nft-save ip6tables-legacy-save ip6tables-nft-save; do
  command -v "$t" >/dev/null 2>&1 && "$t" 2>&1 | grep -v '^#' | sed -E 's/\[[0-9]+:[0-9]+\]//'
done
command -v ipset >/dev/null 2>&1 && ipset list -n 2>&1
ls /run/netns 2>/dev/null
exit 0

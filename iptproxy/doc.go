// Package iptproxy is kube-ipvs' iptables mode: the loud fallback when the kernel cannot do
// IPVS. It proxies Services with NAT rules alone, as kube-proxy's iptables mode does, but
// writes them incrementally: a Service change costs one iptables-restore --noflush per
// family holding only that Service's chains and its own dispatch rules, whatever the
// number of Services.
//
// Dataplane is the mode's dataplane.Dataplane, which the controller drives as it drives
// IPVS mode: Apply writes a sync's changed Services (Proxy.Stage, then Proxy.Open) and
// clears the conntrack entries of UDP flows whose endpoints went (FlowTracker); a repair
// (BeginRepair, in one step) compares every Service with the kernel (Proxy.Resync):
//
//	dp, err := iptproxy.NewDataplane(iptables.OSExec{}, iptproxy.Config{
//		ClusterCIDRs: cidrs, MasqueradeAll: masqAll, Tools: iptables.Config{Backend: backendFlag},
//	}, conntrack.Cleaner{}, log)
//	// leaving the mode: Proxy.Cleanup(); `kube-ipvs cleanup` (package cleanup) removes
//	// these chains with the IPVS mode's, as every KIPVS- chain
//
// Nothing binds VIPs: DNAT in nat PREROUTING and OUTPUT does the work, and the node must
// forward (net.ipv4.ip_forward=1, and IPv6 forwarding for IPv6 Services).
//
// # Chains
//
// Every chain is named KIPVS-…; per Service port (hashing "namespace/name:port/PROTOCOL")
// and per endpoint:
//
//   - nat KIPVS-SVC-<hash>: the ClusterIP's endpoints (internalTrafficPolicy applied): a
//     masquerade rule for sources outside the cluster CIDRs (or all, with
//     MasqueradeAll), ClientIP affinity rules (the recent match, one list per endpoint,
//     --rcheck --seconds <timeout> --reap), then endpoint i with statistic --mode random
//     --probability 1/(n-i), the last unconditionally.
//   - nat KIPVS-SVX-<hash>: the same over the external endpoints when they differ (an
//     externalTrafficPolicy=Local port's local endpoints, or all of them when only the
//     ClusterIP is internalTrafficPolicy=Local).
//   - nat KIPVS-EXT-<hash>: traffic to externalIPs, load-balancer IPs and NodePorts. With
//     externalTrafficPolicy=Cluster it is masqueraded; with Local the client address is
//     kept, while pods (cluster CIDRs) and the node itself use the ClusterIP's endpoints
//     (the node masqueraded).
//   - nat KIPVS-SEP-<hash>: one endpoint: hairpin traffic (the endpoint reaching itself)
//     masqueraded, the affinity list set, DNAT.
//   - filter KIPVS-FW-<hash>: loadBalancerSourceRanges: listed sources return, others DROP.
//     It matches the connection's original destination (conntrack), so it holds before and
//     after DNAT, node-originated connections included.
//
// Shared chains hold one dispatch rule per address and port, added (-A, or -I 1 in nat
// KIPVS-SERVICES, which ends with its jump to KIPVS-NODEPORTS) and deleted (-D) one by one:
// nat KIPVS-SERVICES (ClusterIPs, externalIPs, LB IPs) and KIPVS-NODEPORTS (node IP and
// nodePort), filter KIPVS-SERVICES (REJECT for ports without endpoints: tcp-reset for TCP,
// icmp(6)-port-unreachable otherwise; DROP, as kube-proxy, for traffic of a Local policy
// whose port has endpoints on other nodes only: externalTrafficPolicy for external
// addresses, internalTrafficPolicy for the ClusterIP), filter KIPVS-FIREWALL (source ranges) and filter KIPVS-NODEPORTS
// (health-check node ports accepted). Fixed chains: nat KIPVS-MARK-MASQ (mark 0x4000),
// KIPVS-POSTROUTING (masquerade marked packets), filter KIPVS-INPUT, KIPVS-FORWARD and
// KIPVS-OUTPUT (entry points), filter KIPVS-SERVICE-CIDRS (one REJECT per Service CIDR,
// from KIPVS-FORWARD and KIPVS-OUTPUT: what DNAT left in a Service CIDR has no Service,
// and is refused rather than routed to the default gateway). One jump each from nat PREROUTING, OUTPUT, POSTROUTING and
// filter INPUT, FORWARD, OUTPUT, inserted first.
//
// # Writes
//
// Open diffs each staged Service against what was applied: chains that changed are
// declared (which flushes them) and rewritten, new ones declared, gone ones flushed and
// deleted, dispatch rules added or deleted, all in one restore transaction per family.
// Unchanged Services cost nothing; an Open with nothing to change runs no process. Resync
// reads each family once (-save) and, if anything of ours differs from the desired state,
// rebuilds all of it in one restore; when all is right it writes nothing, so a restart
// adopts intact rules. A failed restore makes the next Open or Resync rebuild the family.
// Dataplane's Result.Writes.Restores counts restores.
package iptproxy

// Package firewall is the pure half of kube-ipvs' packet filtering in IPVS mode: which
// ipsets exist (Sets), which entries each Service puts in them (AppendMembers), which
// Service owns which entry (Tracker), and the iptables rules that match those sets
// (RenderRules). It does no I/O: package ipset writes the sets, package iptables the rules.
//
// The rules are constant: RenderRules depends on the Config only, never on Services, so
// their number and text are the same for one Service and for 100,000. Everything that
// depends on Services is an ipset entry, and a Service change touches only its own entries.
//
// The rules touch only the proxy's own traffic. A node carries other traffic too (an
// operator's IPVS virtual servers, kube-proxy's during a migration, routed non-Kubernetes
// connections), so every rule that drops, rejects, marks or masquerades needs an entry of
// ours (a destination in a set, or for replies from endpoints a source in KIPVS-LOOP-BACK)
// or a mark of the in-cluster layout (model.IsInClusterMark). The guest test
// TestGuestForeignTrafficIsNotTouched (dataplane/ipvsmode) holds them to it. The one broad
// rule accepts: KIPVS-FORWARD lets RELATED,ESTABLISHED packets through a DROP policy.
//
// Sets are per family: an IPv4 set has the base name (KIPVS-CLUSTER-IP), its IPv6 twin the
// suffix "-6" (KIPVS-CLUSTER-IP-6). The one port-only set (KIPVS-HEALTH-CHECK-NODE-PORT,
// bitmap:port) has no family and serves both.
//
// # What runs
//
// The IPVS mode's dataplane (dataplane/ipvsmode, firewall.go there) is the one caller. It
// validates the Config once (RenderRules panics on an invalid one), keeps one Tracker, and
// writes through one ipset.Reconciler and one iptables.Runner:
//
//   - Every sync (Apply), each changed Service's resolved state (from proxy.BuildService,
//     without the virtual servers it lost to another Service) becomes packed members with
//     AppendMembers and SortMembers; a Service whose members Tracker.Same finds unchanged is
//     dropped. Before the IPVS writes, Tracker.UpdateMembers(staged, true) returns the net
//     entries to add and to delete; the additions go to ipset.Reconciler.Apply, and
//     iptables.Runner.Apply(RenderRules(cfg)) keeps the rules in place (running nothing
//     unless their text changed). After the IPVS writes and the unbinding of addresses, the
//     deletions go to ipset Apply, so no packet meets a virtual server whose entries are
//     missing.
//   - A whole repair (at start, and whenever the node's addresses or the Service CIDRs
//     changed): the node's addresses from the snapshot become Config.NodeIPs, every Service
//     is staged (and those the Tracker knows but the snapshot lacks, as deleted),
//     Tracker.UpdateMembers(staged, false) records them without computing changes,
//     ipset.Reconciler.ResyncSets(Sets(cfg), tracker) makes the kernel hold exactly the
//     defined sets with the Tracker's entries (reading the Tracker in place, as a
//     DesiredSets), and then the rules are applied and repaired against iptables-save
//     (Runner.Resync). Sets come first: the rules name them. A periodic repair runs the same
//     check of the sets in steps (ipset.Reconciler.BeginCheck, then SetsCheck.StepNow), the
//     Tracker kept current by the changes.
//   - The Service CIDRs (the repair's snapshot) fill KIPVS-SERVICE-CIDRS through
//     ServiceCIDREntries: they belong to no Service, so they bypass the Tracker, and
//     WithServiceCIDRs joins both into the DesiredSets the repair resyncs against.
//   - Every result reports the desired entry count, Tracker.Count summed over Sets(cfg).
//
// Failed writes come back in the dataplane's result and are retried by the controller; ipset
// Apply and ResyncSets write only what is still missing, so a retry repeats nothing that
// worked.
//
// Elsewhere only names and types are used: package ipset takes SetDef, Entry and Changes,
// package modules asks Sets for the set types it must find kernel modules for, and the
// scale bench reads set names. The iptables fallback mode (package iptproxy) has rules of
// its own. Strict ARP is not here: package sysctl sets arp_ignore and arp_announce.
package firewall

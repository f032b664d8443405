// Package firewall is the pure half of kube-ipvs' packet filtering: which ipsets exist, which
// entries a Service puts in them, and the iptables rules that match those sets. It does no
// I/O; package ipset puts the sets into the kernel and package iptables applies the rules.
//
// The rules are constant: RenderRules depends on the Config only, never on Services, so
// their number and text are the same for one Service and for 100,000. Everything that
// depends on Services is an ipset entry, and a Service change touches only its own entries
// (see Tracker).
//
// Sets are per family: an IPv4 set has the base name (KIPVS-CLUSTER-IP), its IPv6 twin the
// suffix "-6" (KIPVS-CLUSTER-IP-6). The one port-only set (KIPVS-HEALTH-CHECK-NODE-PORT,
// bitmap:port) has no family and serves both.
//
// # How the controller uses it, with packages ipset and iptables
//
// Startup, once the informers have synced:
//
//	cfg := firewall.Config{ClusterCIDRs: ..., MasqueradeAll: ..., NodeIPs: ...}
//	if err := cfg.Validate(); err != nil { ... }         // RenderRules panics otherwise
//	k, err := ipset.NewKernel()                            // netlink, current network namespace
//	sets := ipset.New(k)
//	rules := iptables.New(iptables.OSExec{}, iptables.Config{Backend: flag}) // "" detects
//	tracker := firewall.NewTracker()
//	for each Service: tracker.Update(name, firewall.ServiceEntries(svc, st, cfg))
//	sets.Resync(firewall.Sets(cfg), tracker.Desired()) // sets must exist before rules name them
//	rules.Apply(firewall.RenderRules(cfg))
//	then IPVS and kube-ipvs0 as today
//
// Each sync, for the changed Services (st from proxy.BuildService, nil when deleted):
//
//	add, del := tracker.UpdateMany(map of name -> firewall.ServiceEntries(svc, st, cfg))
//	sets.Apply(add)                        // 1. new entries, so the new paths are open
//	rules.Apply(firewall.RenderRules(cfg)) // 2. no process unless cfg changed
//	IPVS and address changes               // 3.
//	sets.Apply(del)                        // 4. old entries, after IPVS dropped their VSes
//
// Unchanged Services give empty Changes, and ipset.Apply of empty or already-applied Changes
// makes no kernel call. On errors (Result.Errors, Result.Err) apply the same Changes again
// later: only what is still missing is written.
//
// Every --sync-period: sets.Resync(firewall.Sets(cfg), tracker.Desired()) and rules.Resync().
// Cleanup (leaving a node): rules.Cleanup() first, then sets.Cleanup() (the kernel refuses to
// destroy a set an iptables rule references); `kube-ipvs cleanup` (package cleanup) keeps
// that order.
//
// Strict ARP is not here: package sysctl sets arp_ignore and arp_announce.
package firewall

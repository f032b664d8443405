package ipvsmode

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/kube-ipvs/kube-ipvs/dataplane"
	"github.com/kube-ipvs/kube-ipvs/dummyif"
	"github.com/kube-ipvs/kube-ipvs/firewall"
	"github.com/kube-ipvs/kube-ipvs/internal/samens"
	"github.com/kube-ipvs/kube-ipvs/iptables"
	"github.com/kube-ipvs/kube-ipvs/model"
)

// The beginnings of each part's repair (see repair.go).

// ensureLink creates kube-ipvs0 if it is missing; a failure is the result's Err.
func (d *Dataplane) ensureLink() dataplane.Result {
	var res dataplane.Result
	if err := d.p.Addresses.EnsureLink(); err != nil {
		res.Err = fmt.Errorf("dummy interface: %w", err)
		res.AddFailures(dataplane.SubsystemAddress, 1)
	}
	return res
}

// beginWhole begins a whole cycle over s: the sets and rules, and kube-ipvs0's addresses,
// are repaired in the background (each on its own goroutine: the caller applies nothing
// until the cycle is done), while the first RepairStep reads the IPVS table.
func (d *Dataplane) beginWhole(s dataplane.Snapshot) *repairCycle {
	c := &repairCycle{
		whole: true, snapshot: s,
		firewall: make(chan dataplane.Result, 1),
		addrs:    make(chan dataplane.Result, 1),
		listed:   make(chan map[netip.Addr]bool, 1),
	}
	samens.Go(func() { // iptables-restore runs in the caller's namespace
		c.firewall <- d.repairFirewall(s.Services, s.NodeIPs, s.ServiceCIDRs)
	})
	go func() {
		var once sync.Once
		found := func(m map[netip.Addr]bool) { once.Do(func() { c.listed <- m }) }
		res := d.repairAddresses(dummyif.WantAll(s.Binds), nil, found)
		found(nil) // in case the reconciler did not call it
		c.addrs <- res
	}()
	return c
}

// repairFirewall stages every Service and repairs the ipsets and iptables rules against the
// kernel: one step, whose cost follows the number of set entries.
func (d *Dataplane) repairFirewall(services map[model.ServiceName]*model.ServiceState, nodeIPs []netip.Addr, cidrs []netip.Prefix) dataplane.Result {
	d.fw.setNodeIPs(nodeIPs)
	d.fw.cidrs = firewall.ServiceCIDREntries(cidrs, d.fw.cfg)
	for name, st := range services {
		d.fw.stage(name, st)
	}
	for name := range d.fw.tracker.Services() {
		if _, ok := services[name]; !ok {
			d.fw.stage(name, nil)
		}
	}
	fw := d.fw.repair()
	if fw.Err != nil {
		fw.Err = fmt.Errorf("repairing ipsets and iptables rules: %w", fw.Err)
	}
	return fw
}

// beginFirewallCheck begins a periodic cycle's checks of the ipsets (their headers at once,
// their entries listed beside the changes: ipset.SetsCheck) and of the iptables rules (in
// the background), so that however many entries the sets hold and however slow the
// iptables tools are, no step waits for them. The changes between repairs keep the sets'
// desired state current (the controller recomputed every Service before this), so nothing
// is staged here unless the node's addresses or the Service CIDRs changed, which change
// entries of every Service: then the sets and rules are repaired in one go, as a whole
// cycle does.
func (d *Dataplane) beginFirewallCheck(c *repairCycle, services map[model.ServiceName]*model.ServiceState, nodeIPs []netip.Addr, cidrs []netip.Prefix) dataplane.Result {
	entries := firewall.ServiceCIDREntries(cidrs, d.fw.cfg)
	if !slices.Equal(d.fw.cfg.NodeIPs, nodeIPs) || !maps.EqualFunc(d.fw.cidrs, entries, maps.Equal) {
		return d.repairFirewall(services, nodeIPs, cidrs)
	}
	start := time.Now()
	check, sr := d.fw.sets.BeginCheck(d.fw.fromCfg().sets, d.fw.desired())
	res := setsResult(sr, dataplane.OpUpdate)
	res.Merge(d.fw.applyRules())
	rules := make(chan iptables.Result, 1)
	r := d.fw.rules
	samens.Go(func() { rules <- r.Resync() }) // iptables-save runs in the caller's namespace
	res.SetEntries = d.fw.entries()
	res.Phases.Firewall = time.Since(start)
	c.sets, c.rules = check, rules
	return res
}

// owns is OwnsVirtualServer with the node IPs given and onDummy saying which addresses are
// (or were, when the repair began) on kube-ipvs0.
func (d *Dataplane) owns(nodeIPs []netip.Addr, onDummy func(netip.Addr) bool) func(model.VSKey) bool {
	nodeIP := make(map[netip.Addr]bool, len(nodeIPs))
	for _, a := range nodeIPs {
		nodeIP[a] = true
	}
	return func(k model.VSKey) bool {
		return d.cfg.OwnsVirtualServer(k, onDummy, func(a netip.Addr) bool { return nodeIP[a] })
	}
}

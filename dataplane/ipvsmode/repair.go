package ipvsmode

import (
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/kube-ipvs/kube-ipvs/dataplane"
	"github.com/kube-ipvs/kube-ipvs/dummyif"
	"github.com/kube-ipvs/kube-ipvs/firewall"
	"github.com/kube-ipvs/kube-ipvs/internal/samens"
	"github.com/kube-ipvs/kube-ipvs/ipvs"
	"github.com/kube-ipvs/kube-ipvs/model"
)

// repairWhole makes the kernel match the snapshot, all at once (BeginRepair asked for a
// whole repair, or before the first succeeded): the link, the sets and rules, then the
// addresses and IPVS at once. They are independent kernel tables, and the kernel walks a
// device's address list on every add, so binding tens of thousands of addresses is slow on
// its own and need not hold the virtual servers up.
//
// The ipsets and iptables rules are repaired while the VIPs and IPVS are read back: they are
// other kernel tables, and at a restart each part is mostly reading (seconds at tens of
// thousands of Services), which two cores do side by side. IPVS is written only once the
// sets and rules are, as in every sync, so that no packet meets a virtual server whose
// rules are missing.
func (d *Dataplane) repairWhole(s dataplane.Snapshot) dataplane.Result {
	if res := d.ensureLink(); res.Err != nil {
		return res
	}
	fwDone := make(chan struct{})
	var res dataplane.Result
	samens.Go(func() { // iptables-restore runs in the caller's namespace
		defer close(fwDone)
		res = d.repairFirewall(s.Services, s.NodeIPs, s.ServiceCIDRs)
	})
	rest := d.repairAddrsAndIPVS(s, func() { <-fwDone })
	<-fwDone
	res.Merge(rest) // errors joined
	d.repaired = d.repaired || res.Err == nil
	return res
}

// ensureLink creates kube-ipvs0 if it is missing; a failure is the result's Err.
func (d *Dataplane) ensureLink() dataplane.Result {
	var res dataplane.Result
	if err := d.p.Addresses.EnsureLink(); err != nil {
		res.Err = fmt.Errorf("dummy interface: %w", err)
		res.AddFailures(dataplane.SubsystemAddress, 1)
	}
	return res
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

// repairAddrsAndIPVS runs both repairs concurrently. A virtual server is the proxy's when
// its address is one the proxy binds or was bound to kube-ipvs0 when the repair began (a
// Service deleted while the proxy was down leaves both behind), or a node IP with a port in
// the NodePort range; the IPVS repair waits for the address listing before it decides what
// to delete.
func (d *Dataplane) repairAddrsAndIPVS(s dataplane.Snapshot, gate func()) dataplane.Result {
	listed := make(chan map[netip.Addr]bool, 1)
	var once sync.Once
	found := func(m map[netip.Addr]bool) { once.Do(func() { listed <- m }) }
	var addrs dataplane.Result
	done := make(chan struct{})
	go func() {
		defer close(done)
		addrs = d.repairAddresses(dummyif.WantAll(s.Binds), nil, found)
		found(nil) // in case the reconciler did not call it
	}()
	owned := d.ownership(s, listed)
	start := time.Now()
	vs := d.afterIPVS(d.repairIPVSWhole(s.VSes, owned, gate))
	vs.Phases.IPVS = time.Since(start)
	if vs.Err != nil {
		vs.Err = fmt.Errorf("repairing IPVS: %w", vs.Err)
	}
	<-done
	err := vs.Err
	vs.Merge(addrs)
	if err != nil && addrs.Err != nil {
		vs.Err = fmt.Errorf("%w; %w", err, addrs.Err)
	}
	return vs
}

// repairIPVSWhole is IPVS's check in one step as large as everything: the table is read
// back, then (once gate returns: the sets and rules are in place) every virtual server is
// made right and every owned one that is not desired is deleted.
func (d *Dataplane) repairIPVSWhole(vses map[model.VSKey]*model.VirtualServer, owned func(model.VSKey) bool, gate func()) ipvs.Result {
	check, err := d.p.IPVS.BeginWholeCheck(vses)
	gate()
	if err != nil {
		return ipvs.Result{Err: err}
	}
	res, _ := check.Step(check.Left(), func(k model.VSKey) *model.VirtualServer { return vses[k] }, owned)
	return res
}

// ownership returns the repair's test of which virtual servers are the proxy's (see
// repairAddrsAndIPVS); prior delivers the addresses kube-ipvs0 held before the repair.
func (d *Dataplane) ownership(s dataplane.Snapshot, prior <-chan map[netip.Addr]bool) func(model.VSKey) bool {
	var before map[netip.Addr]bool
	known := false
	owns := d.owns(s.NodeIPs, func(a netip.Addr) bool { return s.Binds[a] || before[a] })
	return func(k model.VSKey) bool {
		if !known {
			before, known = <-prior, true
		}
		return owns(k)
	}
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

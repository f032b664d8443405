package ipvsmode

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/kube-ipvs/kube-ipvs/dataplane"
	"github.com/kube-ipvs/kube-ipvs/ipvs"
)

var _ dataplane.SteppedRepairer = (*Dataplane)(nil)

// steppedRepair is the periodic repair under way: IPVS checked a bounded number of virtual
// servers per step (ipvs.Check), with changes applied between the steps.
type steppedRepair struct {
	check *ipvs.Check
	// prior are the addresses kube-ipvs0 held when the repair began: a virtual server on one
	// of them is the proxy's even if no Service binds it any more.
	prior map[netip.Addr]bool
}

// BeginRepair starts a periodic repair: the link, then the ipsets and iptables rules in one
// step, then the listing of the IPVS table that RepairStep works through. kube-ipvs0's
// addresses are not listed: the Watcher's notifications repair them (RepairDrift), unless
// no subscription has been live since the last listing, when they are listed and repaired
// here as the first repair does.
func (d *Dataplane) BeginRepair(l dataplane.Live) dataplane.Result {
	d.stepped = nil
	res := d.repairLinkAndFirewall(l.Services, l.NodeIPs, l.ServiceCIDRs)
	if res.Err != nil {
		return res
	}
	var prior map[netip.Addr]bool
	if !d.addrListingTrusted() {
		addrs, listed := d.relistAddresses(l)
		if res.Merge(addrs); res.Err != nil {
			return res
		}
		prior = listed
	} else {
		prior = d.p.Addresses.Bound()
	}
	start := time.Now()
	check, err := d.p.IPVS.BeginCheck(l.VSKeys)
	res.Phases.IPVS = time.Since(start)
	if err != nil {
		res.Err = fmt.Errorf("repairing IPVS: %w", err)
		res.AddFailures(dataplane.SubsystemIPVS, 1)
		return res
	}
	d.stepped = &steppedRepair{check: check, prior: prior}
	return res
}

// RepairStep checks and repairs up to budget more virtual servers against the desired state
// as it is now. A virtual server changed since BeginRepair is judged by a fresh read, never
// by the listing (see ipvs.Check): a change is not reverted.
func (d *Dataplane) RepairStep(l dataplane.Live, budget int) (dataplane.Result, bool) {
	sr := d.stepped
	if sr == nil {
		return dataplane.Result{}, true
	}
	start := time.Now()
	owned := d.owns(l.NodeIPs, func(a netip.Addr) bool { return l.Bound(a) || sr.prior[a] })
	r, done := sr.check.Step(budget, l.VS, owned)
	res := d.afterIPVS(r)
	res.Phases.IPVS = time.Since(start)
	if done {
		d.stepped = nil
	}
	return res, done
}

// relistAddresses lists kube-ipvs0's addresses and makes them the bound ones; listed are the
// addresses the link held before.
func (d *Dataplane) relistAddresses(l dataplane.Live) (res dataplane.Result, listed map[netip.Addr]bool) {
	start := time.Now()
	d.noteAddrListing()
	res = addrResult(d.p.Addresses.ResyncNotify(l.Binds(), func(m map[netip.Addr]bool) { listed = m }))
	if res.Err != nil {
		res.Err = fmt.Errorf("repairing the dummy interface's addresses: %w", res.Err)
	}
	res.Phases.Addresses = time.Since(start)
	return res, listed
}

package ipvsmode

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"time"

	"github.com/kube-ipvs/kube-ipvs/dataplane"
	"github.com/kube-ipvs/kube-ipvs/firewall"
	"github.com/kube-ipvs/kube-ipvs/internal/samens"
	"github.com/kube-ipvs/kube-ipvs/ipset"
	"github.com/kube-ipvs/kube-ipvs/iptables"
	"github.com/kube-ipvs/kube-ipvs/ipvs"
	"github.com/kube-ipvs/kube-ipvs/model"
)

// steppedRepair is the periodic repair under way: IPVS checked a bounded number of virtual
// servers per step (ipvs.Check), with changes applied between the steps.
type steppedRepair struct {
	check *ipvs.Check
	// sets is the check of the ipsets, listed in the background (nil once finished); rules
	// brings the iptables rules' check, run in the background too (iptables-save is a
	// process: seconds under load), nil once received.
	sets     *ipset.SetsCheck
	rules    chan iptables.Result
	ipvsDone bool
	// prior are the addresses kube-ipvs0 held when the repair began, when it listed them
	// (nil otherwise): a virtual server on one of them is the proxy's even if no Service
	// binds it any more, as is one on an address the proxy holds bound.
	prior map[netip.Addr]bool
}

// BeginRepair starts a repair. Asked for a whole one (l.Whole), or before a whole repair
// has succeeded, it repairs everything at once (repairWhole: the restart's adoption of the
// kernel) and the first RepairStep is done. Otherwise it starts a periodic repair in steps:
// the link, then the ipsets and iptables rules in one step; the first RepairStep begins the
// listing of the IPVS table the others work through. kube-ipvs0's addresses are not listed:
// the Watcher's notifications repair them (RepairDrift), unless no subscription has been
// live since the last listing, when they are listed and repaired here as the first repair
// does.
func (d *Dataplane) BeginRepair(l dataplane.Live) dataplane.Result {
	d.stepped = nil
	if l.Whole || !d.repaired {
		return d.repairWhole(l.Snapshot())
	}
	res, sets, rules := d.beginFirewallCheck(l.Services, l.NodeIPs, l.ServiceCIDRs)
	if res.Err != nil {
		return res
	}
	var prior map[netip.Addr]bool
	if !d.addrListingTrusted() {
		addrs := d.repairAddresses(wantOf(l), nil, func(m map[netip.Addr]bool) { prior = m })
		if res.Merge(addrs); res.Err != nil {
			return res
		}
	}
	// The IPVS check begins with the first RepairStep: a step of its own, so that no step
	// holds both the firewall's begin and the IPVS keys' collection.
	d.stepped = &steppedRepair{prior: prior, sets: sets, rules: rules}
	return res
}

// beginFirewallCheck ensures the link, then starts the checks of the ipsets (their headers
// at once, their entries listed beside the changes: ipset.SetsCheck) and of the iptables
// rules (in the background), so that however many entries the sets hold and however slow
// the iptables tools are, no step waits for them. The changes between repairs keep the
// sets' desired state current (the repair cycle recomputed every Service before this), so
// nothing is staged here unless the node's addresses or the Service CIDRs changed, which
// change entries of every Service: then the sets and rules are repaired in one go, as the
// first repair does.
func (d *Dataplane) beginFirewallCheck(services map[model.ServiceName]*model.ServiceState, nodeIPs []netip.Addr, cidrs []netip.Prefix) (dataplane.Result, *ipset.SetsCheck, chan iptables.Result) {
	if res := d.ensureLink(); res.Err != nil {
		return res, nil, nil
	}
	entries := firewall.ServiceCIDREntries(cidrs, d.fw.cfg)
	if !slices.Equal(d.fw.cfg.NodeIPs, nodeIPs) || !maps.EqualFunc(d.fw.cidrs, entries, maps.Equal) {
		return d.repairFirewall(services, nodeIPs, cidrs), nil, nil
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
	return res, check, rules
}

// RepairStep checks and repairs up to budget more virtual servers against the desired state
// as it is now, and finishes the background checks of the sets and rules that are in. A
// virtual server changed since BeginRepair is judged by a fresh read, never by the listing
// (see ipvs.Check): a change is not reverted. A step never waits for the background: one
// that found nothing in yet says so (Result.Waiting).
func (d *Dataplane) RepairStep(l dataplane.Live, budget int) (dataplane.Result, bool) {
	sr := d.stepped
	if sr == nil {
		return dataplane.Result{}, true
	}
	var res dataplane.Result
	progressed := false
	if sr.sets != nil {
		start := time.Now()
		r, done, finished := sr.sets.StepNow()
		// No SetEntries: a check changes what the kernel holds, never what is desired.
		res.Merge(setsResult(r, dataplane.OpUpdate))
		res.Phases.Firewall = time.Since(start)
		progressed = progressed || finished > 0
		if done {
			sr.sets = nil
		}
	}
	if sr.rules != nil {
		select {
		case rr := <-sr.rules:
			res.Merge(rulesResult(rr.Restores, rr.Err))
			sr.rules = nil
			progressed = true
		default:
		}
	}
	if sr.check == nil {
		start := time.Now()
		next, took := d.p.IPVS.NextListing()
		check, err := d.p.IPVS.BeginCheck(l.VSKeys)
		res.Phases.IPVS = time.Since(start)
		if err == nil {
			res.Listing = &dataplane.TableListing{Listed: check.ListsTable(), LastTook: took, Next: next}
		}
		if err != nil {
			res.Err = fmt.Errorf("repairing IPVS: %w", err)
			res.AddFailures(dataplane.SubsystemIPVS, 1)
			d.stepped = nil
			return res, true
		}
		sr.check = check
		return res, false
	}
	if !sr.ipvsDone && !(progressed && l.Yielding()) {
		start := time.Now()
		listed := sr.check.Listed()
		owned := d.owns(l.NodeIPs, func(a netip.Addr) bool { return l.Bound(a) || sr.prior[a] || d.p.Addresses.IsBound(a) })
		r, done := sr.check.StepUntil(budget, start.Add(dataplane.StepTime), l.Yield, l.VS, owned)
		res.Merge(d.afterIPVS(r))
		res.Phases.IPVS = time.Since(start)
		sr.ipvsDone = done
		progressed = progressed || listed
	}
	done := sr.ipvsDone && sr.sets == nil && sr.rules == nil
	if done {
		d.stepped = nil
	}
	res.Waiting = !progressed && !done
	return res, done
}

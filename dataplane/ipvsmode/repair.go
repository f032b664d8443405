package ipvsmode

import (
	"fmt"
	"math"
	"net/netip"
	"time"

	"github.com/kube-ipvs/kube-ipvs/dataplane"
	"github.com/kube-ipvs/kube-ipvs/ipset"
	"github.com/kube-ipvs/kube-ipvs/iptables"
	"github.com/kube-ipvs/kube-ipvs/ipvs"
	"github.com/kube-ipvs/kube-ipvs/model"
)

// A repair is one cycle, whatever its size: BeginRepair, then RepairStep until it is done.
// Each kernel part has one repair, begun by BeginRepair and finished by the steps:
//
//   - the ipsets and iptables rules: a check of the sets (ipset.SetsCheck, listed in the
//     background) and of the rules (iptables.Runner.Resync, in the background: it runs
//     processes); or, when every Service's entries may have changed (a whole repair, new
//     node addresses or Service CIDRs), every Service staged and the same checks done in
//     one go (repairFirewall);
//   - kube-ipvs0's addresses: a listing and repair of the link (dummyif.Reconciler.Repair)
//     when the watcher's notifications cannot be trusted to have followed it; otherwise
//     nothing, as RepairDrift repairs what they report;
//   - IPVS: a check of the table (ipvs.Check), begun by the first step and worked through,
//     budget virtual servers at a time, by the others.
//
// A whole repair (asked for by Live.Whole, and every repair until one whole repair has
// succeeded: a restart's adoption of the kernel) is the same cycle with its steps as large
// as everything: its first RepairStep is done (or, when it was not asked for, BeginRepair
// does it all, since its caller may apply changes before the next step). The controller
// applies no change until a whole repair it asked for is done, so its parts run side by side: BeginRepair starts the sets and rules and the addresses
// in the background, and the step reads the IPVS table meanwhile, writes it once the sets
// and rules are in place (as every sync does, so that no packet meets a virtual server
// whose rules are missing), then waits for the addresses. At a restart with tens of
// thousands of Services each part is mostly reading, for seconds, which two cores do side by
// side. A periodic repair lets changes through between its steps, so only its listings
// run beside them.

// repairCycle is the repair under way (BeginRepair, RepairStep).
type repairCycle struct {
	// whole: the cycle is one step as large as everything, its parts side by side; whole
	// is what it repairs (the desired state when it began: nothing changes until it ends).
	whole    bool
	snapshot dataplane.Snapshot
	// firewall brings the sets' and rules' repair in one go, run in the background by a
	// whole cycle; addrs brings its repair of kube-ipvs0, and listed the addresses that
	// repair found on the link before writing. Each is nil when there is none, or once
	// received.
	firewall chan dataplane.Result
	addrs    chan dataplane.Result
	listed   chan map[netip.Addr]bool
	// sets is the check of the ipsets, listed in the background (nil once finished); rules
	// brings the iptables rules' check (nil once received).
	sets  *ipset.SetsCheck
	rules chan iptables.Result
	// prior are the addresses kube-ipvs0 held when the cycle listed it (nil: not listed):
	// a virtual server on one of them is the proxy's even if no Service binds it any more.
	prior map[netip.Addr]bool
	// check is the IPVS table's check, from the first RepairStep on.
	check    *ipvs.Check
	ipvsDone bool
}

// BeginRepair starts a repair cycle (see above): the link, then the beginning of each
// part's repair.
func (d *Dataplane) BeginRepair(l dataplane.Live) dataplane.Result {
	d.cycle = nil
	if res := d.ensureLink(); res.Err != nil {
		return res
	}
	if l.Whole || !d.repaired {
		d.cycle = d.beginWhole(l.Snapshot())
		if !l.Whole {
			// Not asked to be whole, the caller may apply changes before the next step,
			// which the background parts must not meet: the cycle ends here.
			res, _ := d.RepairStep(l, math.MaxInt)
			return res
		}
		return dataplane.Result{}
	}
	c := &repairCycle{}
	res := d.beginFirewallCheck(c, l.Services, l.NodeIPs, l.ServiceCIDRs)
	if res.Err != nil {
		return res
	}
	if !d.addrListingTrusted() {
		addrs := d.repairAddresses(wantOf(l), nil, func(m map[netip.Addr]bool) { c.prior = m })
		if res.Merge(addrs); res.Err != nil {
			return res
		}
	}
	d.cycle = c
	return res
}

// RepairStep checks and repairs up to budget more virtual servers against the desired state
// as it is now (a whole cycle: all of them), and takes in the background work that is done.
// A virtual server changed since BeginRepair is judged by a fresh read, never by the
// listing (see ipvs.Check): a change is not reverted. A periodic cycle's step never waits
// for the background: one that found nothing in yet says so (Result.Waiting). The step
// that begins the IPVS check is a step of its own in a periodic cycle, so that no step
// holds both the firewall's check and the collection of the IPVS keys.
func (d *Dataplane) RepairStep(l dataplane.Live, budget int) (dataplane.Result, bool) {
	c := d.cycle
	if c == nil {
		return dataplane.Result{}, true
	}
	var res dataplane.Result
	if c.check == nil {
		if !d.beginIPVSCheck(c, l, &res) {
			c.ipvsDone = true // the cycle ends with the error, once its background is in
		} else if !c.whole {
			return res, false
		}
	}
	progressed := d.takeFirewall(c, &res)
	if !c.ipvsDone && !(progressed && l.Yielding()) {
		progressed = d.stepIPVS(c, l, budget, &res) || progressed
	}
	d.takeAddresses(c, &res)
	done := c.ipvsDone && c.sets == nil && c.rules == nil && c.firewall == nil && c.addrs == nil
	if done {
		d.cycle = nil
		if c.whole {
			d.repaired = d.repaired || res.Err == nil
		}
	}
	res.Waiting = !progressed && !done
	return res, done
}

// beginIPVSCheck begins the IPVS table's check: a whole cycle's dumps the table (beside
// the background parts), a periodic one's lists it in the background, or reads by key
// what the proxy knows of (see ipvs/listing.go). false: it failed, in res.
func (d *Dataplane) beginIPVSCheck(c *repairCycle, l dataplane.Live, res *dataplane.Result) bool {
	start := time.Now()
	var check *ipvs.Check
	var err error
	if c.whole {
		check, err = d.p.IPVS.BeginWholeCheck(c.snapshot.VSes)
	} else {
		next, took := d.p.IPVS.NextListing()
		check, err = d.p.IPVS.BeginCheck(l.VSKeys)
		if err == nil {
			res.Listing = &dataplane.TableListing{Listed: check.ListsTable(), LastTook: took, Next: next}
		}
	}
	res.Phases.IPVS += time.Since(start)
	if err != nil {
		res.Err = fmt.Errorf("repairing IPVS: %w", err)
		res.AddFailures(dataplane.SubsystemIPVS, 1)
		return false
	}
	c.check = check
	return true
}

// takeFirewall takes in what the sets' and rules' repair finished: in a whole cycle, all
// of it (waiting for it: IPVS is written after it); in a periodic one, what is in.
// It says whether anything was.
func (d *Dataplane) takeFirewall(c *repairCycle, res *dataplane.Result) bool {
	progressed := false
	if c.firewall != nil {
		res.Merge(<-c.firewall)
		c.firewall = nil
		progressed = true
	}
	if c.sets != nil {
		start := time.Now()
		r, done, finished := c.sets.StepNow()
		// No SetEntries: a check changes what the kernel holds, never what is desired.
		res.Merge(setsResult(r, dataplane.OpUpdate))
		res.Phases.Firewall += time.Since(start)
		progressed = progressed || finished > 0
		if done {
			c.sets = nil
		}
	}
	if c.rules != nil {
		select {
		case rr := <-c.rules:
			res.Merge(rulesResult(rr.Restores, rr.Err))
			c.rules = nil
			progressed = true
		default:
		}
	}
	return progressed
}

// stepIPVS checks the next virtual servers: budget of them, within dataplane.StepTime and
// until a change waits, in a periodic cycle; all of them in a whole one. It says whether the
// listing is in (before it is, a step checks nothing).
func (d *Dataplane) stepIPVS(c *repairCycle, l dataplane.Live, budget int, res *dataplane.Result) bool {
	start := time.Now()
	listed := c.check.Listed()
	var r ipvs.Result
	if c.whole {
		s := c.snapshot
		owned := d.owns(s.NodeIPs, func(a netip.Addr) bool { return s.Binds[a] || c.priorAddrs()[a] })
		r, c.ipvsDone = c.check.Step(c.check.Left(), func(k model.VSKey) *model.VirtualServer { return s.VSes[k] }, owned)
	} else {
		owned := d.owns(l.NodeIPs, func(a netip.Addr) bool { return l.Bound(a) || c.prior[a] || d.p.Addresses.IsBound(a) })
		r, c.ipvsDone = c.check.StepUntil(budget, start.Add(dataplane.StepTime), l.Yield, l.VS, owned)
	}
	vs := d.afterIPVS(r)
	if vs.Err != nil {
		vs.Err = fmt.Errorf("repairing IPVS: %w", vs.Err)
	}
	res.Merge(vs)
	res.Phases.IPVS += time.Since(start)
	return listed
}

// priorAddrs are the addresses a whole cycle's repair of kube-ipvs0 found on the link
// before it wrote (waiting for its listing).
func (c *repairCycle) priorAddrs() map[netip.Addr]bool {
	if c.listed != nil {
		c.prior = <-c.listed
		c.listed = nil
	}
	return c.prior
}

// takeAddresses takes in a whole cycle's repair of kube-ipvs0, waiting for it.
func (d *Dataplane) takeAddresses(c *repairCycle, res *dataplane.Result) {
	if c.addrs == nil {
		return
	}
	res.Merge(<-c.addrs)
	c.addrs = nil
	c.listed = nil
}

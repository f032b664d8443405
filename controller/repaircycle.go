package controller

import (
	"context"
	"net/netip"
	"runtime/trace"
	"strings"
	"time"

	"github.com/kube-ipvs/kube-ipvs/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/lockwalk"
	"github.com/kube-ipvs/kube-ipvs/internal/samens"
	"github.com/kube-ipvs/kube-ipvs/metrics"
	"github.com/kube-ipvs/kube-ipvs/model"
)

// repairCycle is a periodic repair under way, cut into steps that the sync loop runs when
// no change is due (schedule.step): first every Service recomputed, RepairStep Services a
// step, each step's difference applied as a change; then the dataplane's repair
// (BeginRepair, then RepairStep virtual servers a step). A change applied between two steps
// is in the kernel at once, and the dataplane's later steps judge the kernel against it.
type repairCycle struct {
	began time.Time
	names *cycleNames // the Services still to recompute
	pcfg  buildConfig
	cidrs []netip.Prefix
	begun bool // the dataplane's part has begun
	steps int
	// unchanged counts the Services passed over as built from the objects held now.
	unchanged int
	busy      time.Duration // the steps' wall time, summed
	cpu       time.Duration // the steps' CPU time, summed
	most      time.Duration // the longest step
	// mostThread is where the longest step's time went: CPU, or waiting for one.
	mostThread threadTime
	// mostKind is the kind of the longest step (metrics.Step*) and mostPhases where its
	// time went; kindMost the longest step of each kind.
	mostKind   string
	mostPhases dataplane.Phases
	kindMost   map[string]time.Duration
	res        dataplane.Result
	failed     bool // a step failed as a whole
	// resumeAt: the last step found the dataplane waiting for background work; the next
	// waits until then, or until a change comes.
	resumeAt time.Time
	// host brings the node's addresses, listed in the background when the cycle began (nil
	// once taken): the listing dumps every address of the namespace, kube-ipvs0's VIPs with
	// them in the address binding (about 100 ms at 10,000 under emulation, in the sync loop
	// a change waited for it).
	host chan hostListing
}

// hostListing is a background listing of the node's addresses.
type hostListing struct {
	addrs []netip.Addr
	err   error
}

// repairsInSteps says whether the next periodic repair is a cycle of steps: steps are
// configured (--repair-step), and a whole repair has run once (the first repair adopts the
// kernel and binds every address, and the proxy is ready after it).
func (c *Controller) repairsInSteps() bool {
	return c.cfg.RepairStep > 0 && c.repairedOnce
}

// beginCycle starts a repair cycle by listing the node's addresses in the background; the
// first step that finds them in (takeNode) reads the node, as a full sync does, and starts
// the walk over the Services (cycleNames: every one the proxy holds, one the informers no
// longer have is removed when it is recomputed, then every other one the informers have)
// without recomputing any yet.
func (c *Controller) beginCycle() {
	cy := &repairCycle{began: time.Now(), host: make(chan hostListing, 1)}
	c.cycle = cy
	c.sched.cycleBegan()
	list := c.hostAddrs
	samens.Go(func() { // the node's addresses are those of the loop's namespace
		addrs, err := list()
		cy.host <- hostListing{addrs, err}
	})
	cy.busy = time.Since(cy.began)
}

// takeNode reads the node, as a full sync does, once the node's addresses are listed, and
// starts the walk over the Services. in: the listing was in (and the cycle may have ended,
// if it failed).
func (c *Controller) takeNode(cy *repairCycle) (in bool) {
	var l hostListing
	select {
	case l = <-cy.host:
	default:
		return false
	}
	start := time.Now()
	cy.host = nil
	if err := c.refreshNodeWith(l.addrs, l.err); err != nil {
		cy.res.Err = err
		c.endCycle()
		return true
	}
	cy.names = newCycleNames(c.state.services, c.src.services)
	cy.pcfg = c.proxyConfig()
	cidrs, from := c.serviceCIDRs()
	c.noteServiceCIDRs(cidrs, from)
	cy.cidrs = cidrs
	cy.busy += time.Since(start)
	return true
}

// cycleStep runs the cycle's next step and ends the cycle after its last.
func (c *Controller) cycleStep() {
	cy := c.cycle
	if cy.host != nil {
		if !c.takeNode(cy) {
			cy.resumeAt = time.Now().Add(dataplane.StepPause) // a pause, as a Waiting step is
		}
		return
	}
	start := time.Now()
	clock := startThreadClock()
	var res dataplane.Result
	done := false
	kind := metrics.StepCheck
	switch {
	case cy.names.more(c.state.services):
		kind = metrics.StepServices
	case !cy.begun:
		kind = metrics.StepBegin
	}
	// A region per step, so that an execution trace (the bench's -slowtrace) shows which
	// step a change waited for.
	defer trace.StartRegion(context.Background(), "repair step: "+kind).End()
	switch kind {
	case metrics.StepServices:
		res = c.recomputeStep(cy)
		c.setEntries = res.SetEntries
	case metrics.StepBegin:
		cy.begun = true
		res = c.dp.BeginRepair(c.live())
		c.setEntries = res.SetEntries
	default:
		res, done = c.dp.RepairStep(c.live(), c.cfg.RepairStep)
	}
	if res.Waiting {
		// Nothing done but finding the background work (the informers' list, the
		// dataplane's listings) not in yet: a pause, not busy time (which spaces the
		// cycles), and not a step.
		clock.drop()
		cy.resumeAt = time.Now().Add(dataplane.StepPause)
		return
	}
	took := time.Since(start)
	thread := clock.stop()
	cy.cpu += thread.CPU
	cy.busy += took
	if took > cy.most {
		cy.most, cy.mostKind, cy.mostPhases, cy.mostThread = took, kind, res.Phases, thread
	}
	if cy.kindMost == nil {
		cy.kindMost = map[string]time.Duration{}
	}
	cy.kindMost[kind] = max(cy.kindMost[kind], took)
	cy.steps++
	if m := c.obs.Metrics; m != nil {
		m.RepairStepDone(kind, took)
	}
	c.noteResult(res)
	c.retry(res)
	phases := res.Phases
	res.Phases = dataplane.Phases{}
	cy.res.Merge(res)
	cy.res.Phases.Firewall += phases.Firewall
	cy.res.Phases.Addresses += phases.Addresses
	cy.res.Phases.IPVS += phases.IPVS
	if res.Err != nil || done {
		c.endCycle()
	}
}

// recomputeStep recomputes up to RepairStep Services and applies what changed, as an
// incremental sync does: a Service whose objects did not change writes nothing, and one
// built from the very objects the informers hold now is not rebuilt (buildInputs; up to
// unchangedPerStep of them a step, each a lookup). A step that found no Service to take yet
// (the informers' list is not in) is Waiting.
func (c *Controller) recomputeStep(cy *repairCycle) dataplane.Result {
	ch := dataplane.Change{Services: map[model.ServiceName]*model.ServiceState{}, VSes: map[model.VSKey]*model.VirtualServer{}}
	deadline := time.Now().Add(dataplane.StepTime)
	done, passed, skipped := 0, 0, false
names:
	for done < c.cfg.RepairStep && passed < unchangedPerStep*c.cfg.RepairStep {
		if (done > 0 || passed > 0 || skipped) && (time.Now().After(deadline) || c.changeDue()) {
			break // a step stays short however slow the machine (the Apply below counts too), and gives way to a change
		}
		name, st, err := cy.names.take(c.state.services)
		switch {
		case err != nil:
			return dataplane.Result{Err: err}
		case st == nameSkipping:
			skipped = true
		case st == nameWaiting && done == 0 && passed == 0 && !skipped:
			return dataplane.Result{Waiting: true}
		case st != nameReady:
			break names
		default:
			svc, slices := c.src.serviceAndSlices(name)
			in := buildInputs{svc: svc, slices: slices, config: cy.pcfg.key}
			if c.unchanged(name, in) {
				passed++
				continue
			}
			c.build(name, in, cy.pcfg, &ch)
			done++
		}
	}
	cy.unchanged += passed
	return c.dp.Apply(ch)
}

// unchangedPerStep is how many unchanged Services a recompute step passes over per
// Service of its budget: a lookup and a comparison each, against a build and a diff.
const unchangedPerStep = 16

// endCycle reports a finished (or failed) cycle: the log line, the metrics, the schedule.
func (c *Controller) endCycle() {
	cy := c.cycle
	c.cycle = nil
	now := time.Now()
	wall := now.Sub(cy.began)
	failed := cy.res.Err != nil
	c.sched.cycleEnded(now, cy.busy, failed)
	if !failed {
		c.sched.ticked(now, time.Nanosecond)
	}
	st := Stats{Full: true, Services: len(c.state.services), Duration: wall, VirtualSrvrs: len(c.state.vsOwner),
		Phases: FullSyncPhases{Firewall: cy.res.Phases.Firewall, Addresses: cy.res.Phases.Addresses, IPVS: cy.res.Phases.IPVS}}
	w := cy.res.Writes
	st.IPVSWrites, st.AddrWrites, st.SetWrites, st.Restores = w.IPVS, w.Addresses, w.SetEntries, w.Restores
	st.Errors = cy.res.Failed()
	c.mu.Lock()
	st.TotalSyncs = c.stats.TotalSyncs + 1
	c.stats = st
	c.mu.Unlock()
	if m := c.obs.Metrics; m != nil {
		m.RepairCycleDone(wall, cy.cpu, cy.most, cy.kindMost)
	}
	c.noteSync(true, st, cy.busy, cy.res, cy.began, nil)
	if c.obs.ProxyHealth != nil && !failed {
		c.obs.ProxyHealth.FullSyncTook(cy.most) // a change waits for one step, not the cycle
	}
	share := 0.0
	if wall > 0 {
		share = cy.cpu.Seconds() / wall.Seconds()
	}
	args := []any{"steps", cy.steps, "unchanged_services", cy.unchanged, "took", wall.Round(time.Millisecond),
		"busy", cy.busy.Round(time.Millisecond), "core_share", float64(int(share*1000)) / 1000,
		"longest_step", cy.most.Round(time.Microsecond), "longest_step_kind", cy.mostKind,
		"longest_step_phases", phaseText(cy.mostPhases), "longest_step_cpu", cy.mostThread.CPU.Round(time.Millisecond),
		"longest_step_runqueue_wait", cy.mostThread.RunQueue.Round(time.Millisecond), "ipvs_writes", w.IPVS, "addr_writes", w.Addresses,
		"ipset_writes", w.SetEntries, "iptables_restores", w.Restores, "errors", st.Errors,
		"services", st.Services, "virtual_servers", st.VirtualSrvrs}
	if l := cy.res.Listing; l != nil {
		// The IPVS table is listed whole, which alone shows strays, only as often as its
		// length allows (a listing holds every writer up: see ipvs/listing.go).
		args = append(args, "ipvs_table_listed", l.Listed, "ipvs_last_listing_kernel_time", l.LastTook.Round(time.Millisecond))
		if !l.Listed {
			args = append(args, "ipvs_next_listing_in", time.Until(l.Next).Round(time.Second))
		}
	}
	c.log.Info("repair cycle done", args...)
	if failed {
		c.log.Error("a repair step failed as a whole; the repair runs again after a backoff", "err", cy.res.Err)
	}
}

// phaseText says where a step's time went, for the log: "firewall=1ms ipvs=3ms".
func phaseText(p dataplane.Phases) string {
	var parts []string
	for _, ph := range []struct {
		name string
		d    time.Duration
	}{{"firewall", p.Firewall}, {"addresses", p.Addresses}, {"ipvs", p.IPVS}} {
		if ph.d > 0 {
			parts = append(parts, ph.name+"="+ph.d.Round(time.Microsecond).String())
		}
	}
	return strings.Join(parts, " ")
}

// live is the desired state as the dataplane reads it during a step.
func (c *Controller) live() dataplane.Live {
	var cidrs []netip.Prefix
	if c.cycle != nil {
		cidrs = c.cycle.cidrs
	}
	return dataplane.Live{
		Services: c.state.services,
		VS:       c.state.desiredVS,
		VSKeys: func(yield func(model.VSKey) bool) {
			lockwalk.Keys(c.stateMu.RLocker(), func() map[model.VSKey]model.ServiceName { return c.state.vsOwner }, yield)
		},
		VSes:         c.state.allVSes,
		Bound:        c.state.bound,
		Binds:        c.state.allBinds,
		NodeIPs:      c.node.nodeIPs,
		ServiceCIDRs: cidrs,
		Yield:        c.changeDue,
	}
}

// changeDue reports whether a change waits to be applied and may be now: a repair step
// under way ends early for it (see dataplane.Live.Yield).
func (c *Controller) changeDue() bool {
	if time.Since(c.sched.lastSync) < c.sched.minInterval {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.dirty) > 0
}

// repairDrift repairs the drift the dataplane heard of (kube-ipvs0's notifications).
func (c *Controller) repairDrift() {
	start := time.Now()
	res := c.dp.RepairDrift(c.live())
	c.noteResult(res)
	c.retry(res)
	if res.Writes.Addresses > 0 || res.Failed() > 0 {
		c.log.Info("drift of the dummy interface repaired", "addr_writes", res.Writes.Addresses,
			"errors", res.Failed(), "took", time.Since(start).Round(time.Microsecond))
	}
	if res.Err != nil {
		c.sched.askFull() // the link could not be made right: a repair, with its backoff
	}
}

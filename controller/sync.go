package controller

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/kube-ipvs/kube-ipvs/dataplane"
	"github.com/kube-ipvs/kube-ipvs/model"
	"github.com/kube-ipvs/kube-ipvs/proxy"
)

// sync computes and applies. full recomputes every Service and repairs the kernel against
// what it holds; otherwise only the dirty Services (and earlier failures) are applied from
// the dataplane's caches.
func (c *Controller) sync(full bool) error {
	start := time.Now()
	clock := startThreadClock()
	c.mu.Lock()
	dirty, triggers := c.dirty, c.triggers
	c.dirty, c.triggers = map[model.ServiceName]bool{}, map[model.ServiceName][]trigger{}
	c.takePending()
	c.mu.Unlock()
	c.takeVerdicts()

	st := Stats{Full: full}
	var res dataplane.Result
	if full {
		res = c.syncFull(&st)
	} else {
		res = c.syncChanged(dirty, &st)
	}
	st.IPVSWrites, st.AddrWrites = res.Writes.IPVS, res.Writes.Addresses
	st.SetWrites, st.Restores = res.Writes.SetEntries, res.Writes.Restores
	st.Errors = res.Failed()
	st.Duration = time.Since(start)
	st.VirtualSrvrs = len(c.state.vsOwner)
	c.noteResult(res)
	c.setEntries = res.SetEntries
	c.retry(res)
	now := time.Now()
	if c.sched.synced(now, full, st.Duration, st.Errors > 0, full && res.Err != nil) {
		c.log.Warn("the periodic repair is slow: it now runs less often than --sync-period, so that changes wait for it at most a fifth of the time",
			"took", st.Duration.Round(time.Millisecond), "sync_period", c.cfg.SyncPeriod, "repair_every", c.sched.repairInterval().Round(time.Second))
	}
	if res.Err != nil && !full {
		c.sched.askFull() // a step failed as a whole: repair from the desired state
	}
	firstRepair := full && res.Err == nil && !c.repairedOnce
	if full && res.Err == nil {
		c.repairedOnce = true
	}
	c.sched.ticked(now, time.Nanosecond) // let the dataplane look at its periodic work
	c.mu.Lock()
	st.TotalSyncs = c.stats.TotalSyncs + 1
	c.stats = st
	c.mu.Unlock()
	c.noteSync(full, st, st.Duration, res, start, triggers)
	var thread threadTime
	if logsPhases(st) {
		thread = clock.stop()
	} else {
		clock.drop() // not logged: no second read of /proc on the common path
	}
	c.logSync(st, thread)
	if firstRepair && c.obs.FirstRepair != nil {
		c.obs.FirstRepair()
	}
	switch {
	case res.Err != nil:
		return res.Err
	case st.Errors > 0:
		return fmt.Errorf("%d kernel operations failed (see the log); they will be retried", st.Errors)
	}
	return nil
}

// slowSync is the duration from which an incremental sync's log line says where its time
// went, as a full sync's always does: a change that took seconds to reach the kernel is
// what an operator looks into.
const slowSync = time.Second

// logsPhases says whether a sync's log line says where its time went.
func logsPhases(st Stats) bool { return st.Full || st.Duration >= slowSync }

// logSync logs a sync's figures; a full or slow one's say where its time went, in its parts
// and on the sync goroutine's thread (CPU, waiting for a CPU, and the rest blocked).
func (c *Controller) logSync(st Stats, thread threadTime) {
	attrs := []any{"full", st.Full, "services", st.Services, "ipvs_writes", st.IPVSWrites,
		"addr_writes", st.AddrWrites, "ipset_writes", st.SetWrites, "iptables_restores", st.Restores, "errors", st.Errors,
		"virtual_servers", st.VirtualSrvrs, "took", st.Duration.Round(time.Microsecond)}
	if logsPhases(st) {
		p := st.Phases
		attrs = append(attrs, "took_build", p.Build.Round(time.Millisecond), "took_firewall", p.Firewall.Round(time.Millisecond),
			"took_addresses", p.Addresses.Round(time.Millisecond), "took_ipvs", p.IPVS.Round(time.Millisecond),
			"cpu", thread.CPU.Round(time.Millisecond), "runqueue_wait", thread.RunQueue.Round(time.Millisecond))
	}
	c.log.Info("sync done", attrs...)
}

// retry queues what failed, per key, for the next sync; a missing scheduler instead marks
// the scheduler unavailable and recomputes the Service, which then gets the default.
func (c *Controller) retry(res dataplane.Result) {
	for k, e := range res.FailedVS {
		owner, _ := c.state.ownerOf(k)
		var su dataplane.SchedulerUnavailable
		if errors.As(e, &su) {
			c.unavailable[su.UnavailableScheduler()] = true
			c.log.Warn("the kernel has no such IPVS scheduler; the Service gets the default", "service", owner,
				"virtual_server", k, "scheduler", su.UnavailableScheduler(), "default", c.cfg.DefaultScheduler)
			if owner.Name != "" {
				c.markDirtyLater(owner)
			}
			continue
		}
		c.retryVS[k] = true
		c.log.Error("programming a virtual server failed; will retry", "service", owner, "virtual_server", k, "err", e)
	}
	for a, e := range res.FailedIP {
		c.retryIP[a] = true
		c.log.Error("binding address failed; will retry", "address", a, "services", joinNames(c.state.servicesBinding(a)), "err", e)
	}
	if res.Err != nil {
		c.log.Error("a kernel step failed as a whole; a full repair follows", "err", res.Err)
	}
}

// syncChanged recomputes the dirty Services and applies only what changed, plus whatever
// failed before (looked up per key: a sync must not cost more because the cluster is
// larger). No kernel reads: a sync with nothing to change writes nothing.
func (c *Controller) syncChanged(dirty map[model.ServiceName]bool, st *Stats) dataplane.Result {
	start := time.Now()
	pcfg := c.proxyConfig()
	ch := dataplane.Change{Services: map[model.ServiceName]*model.ServiceState{}, VSes: map[model.VSKey]*model.VirtualServer{}}
	for _, name := range sortedNames(dirty) {
		c.recompute(name, pcfg, &ch)
	}
	for k := range c.retryVS {
		if _, ok := ch.VSes[k]; !ok {
			ch.VSes[k] = c.state.desiredVS(k)
		}
	}
	for a := range c.retryIP {
		if c.state.bound(a) {
			ch.Bind = append(ch.Bind, a)
		} else {
			ch.Unbind = append(ch.Unbind, a)
		}
	}
	c.retryVS, c.retryIP = map[model.VSKey]bool{}, map[netip.Addr]bool{}
	st.Services = len(dirty)
	st.Phases.Build = time.Since(start)
	res := c.dp.Apply(ch)
	st.Phases.Firewall, st.Phases.Addresses, st.Phases.IPVS = res.Phases.Firewall, res.Phases.Addresses, res.Phases.IPVS
	return res
}

// syncFull recomputes every Service and repairs the kernel against what it holds.
func (c *Controller) syncFull(st *Stats) dataplane.Result {
	if err := c.refreshNode(); err != nil {
		return dataplane.Result{Err: err}
	}
	start := time.Now()
	svcs, err := c.src.services.List(labels.Everything())
	if err != nil {
		return dataplane.Result{Err: err}
	}
	seen := make(map[model.ServiceName]bool, len(svcs))
	for _, s := range svcs {
		seen[model.ServiceName{Namespace: s.Namespace, Name: s.Name}] = true
	}
	for name := range c.state.services {
		if !seen[name] {
			c.updateState(name, nil)
			delete(c.built, name)
			c.trackChecks(name, nil)
			c.problems.forget(name)
		}
	}
	pcfg := c.proxyConfig()
	var none dataplane.Change
	for _, name := range sortedNames(seen) {
		c.recompute(name, pcfg, &none)
	}
	c.retryVS, c.retryIP = map[model.VSKey]bool{}, map[netip.Addr]bool{}
	c.seedFromKernel(pcfg)
	st.Services = len(seen)
	st.Phases.Build = time.Since(start)
	cidrs, from := c.serviceCIDRs()
	c.noteServiceCIDRs(cidrs, from)
	res := c.repairWhole(cidrs)
	st.Phases.Firewall, st.Phases.Addresses, st.Phases.IPVS = res.Phases.Firewall, res.Phases.Addresses, res.Phases.IPVS
	return res
}

// repairWhole is the dataplane's repair asked to be whole: BeginRepair, then RepairStep with
// no bound until done (its first RepairStep is). Changes wait for it, as for the whole of a
// full sync.
func (c *Controller) repairWhole(cidrs []netip.Prefix) dataplane.Result {
	l := c.live()
	l.ServiceCIDRs, l.Yield, l.Whole = cidrs, nil, true
	res := c.dp.BeginRepair(l)
	for res.Err == nil {
		r, done := c.dp.RepairStep(l, math.MaxInt)
		res.Merge(r)
		if done {
			break
		}
		if r.Waiting {
			time.Sleep(dataplane.StepPause)
		}
	}
	return res
}

// recompute builds one Service's desired state, resolves it against the other Services (a
// virtual server another Service owns is taken out of it, with a Problem naming that
// Service), adds what that changes to ch, and only then reports its Problems: a Service
// that lost a conflict writes nothing for what it lost, and is told.
func (c *Controller) recompute(name model.ServiceName, pcfg buildConfig, ch *dataplane.Change) {
	svc, slices := c.src.serviceAndSlices(name)
	c.build(name, buildInputs{svc: svc, slices: slices, config: pcfg.key}, pcfg, ch)
}

// build is recompute from the objects already looked up.
func (c *Controller) build(name model.ServiceName, in buildInputs, pcfg buildConfig, ch *dataplane.Change) {
	svc := in.svc
	st := proxy.BuildService(svc, in.slices, pcfg.cfg)
	c.noteBuilt(name, st, in)
	d := c.updateState(name, st)
	c.trackChecks(name, st)
	if ch.VSes != nil { // an incremental sync; a repair compares everything
		ch.Services[name] = st
		for k, v := range d.vs {
			ch.VSes[k] = v
		}
		ch.Bind = append(ch.Bind, d.bind...)
		ch.Unbind = append(ch.Unbind, d.unbind...)
	}
	for _, r := range d.requeue {
		c.markDirtyLater(r)
	}
	if st == nil {
		c.problems.forget(name)
		return
	}
	c.problems.report(svc, st)
}

// refreshNode reads the zone, the node's own addresses (which no Service may take) and the
// node IPs for NodePort virtual servers.
func (c *Controller) refreshNode() error {
	host, err := c.hostAddrs()
	return c.refreshNodeWith(host, err)
}

// refreshNodeWith is refreshNode with the node's addresses listed (host, or the listing's
// error) by the caller.
func (c *Controller) refreshNodeWith(host []netip.Addr, err error) error {
	c.node.zone = ""
	node, nerr := c.src.nodes.Get(c.cfg.NodeName)
	if nerr == nil {
		c.node.zone = node.Labels[corev1.LabelTopologyZone]
	}
	if err != nil {
		return fmt.Errorf("listing the node's addresses: %w", err)
	}
	c.node.host = make(map[netip.Addr]bool, len(host))
	for _, a := range host {
		c.node.host[a.WithZone("").Unmap()] = true
	}
	c.noteFamilies()
	if !c.cfg.NodePortPrimary {
		c.node.nodeIPs = proxy.NodePortAddresses(c.cfg.NodePortAddresses, host)
		return nil
	}
	c.node.nodeIPs = nil
	if len(c.cfg.NodePortAddresses) > 0 {
		c.node.nodeIPs = proxy.NodePortAddresses(c.cfg.NodePortAddresses, host)
	}
	primary := c.cfg.PrimaryNodeIP
	if primary.IsValid() {
		c.node.nodeIPs = append(c.node.nodeIPs, primary)
	}
	if node != nil {
		for _, a := range node.Status.Addresses {
			ip, err := netip.ParseAddr(a.Address)
			if err != nil || a.Type != corev1.NodeInternalIP {
				continue
			}
			ip = ip.Unmap()
			if primary.IsValid() && ip.Is4() == primary.Is4() {
				continue // --bind-address stands for the node's IP of its family
			}
			c.node.nodeIPs = append(c.node.nodeIPs, ip)
		}
	}
	slices.SortFunc(c.node.nodeIPs, netip.Addr.Compare)
	c.node.nodeIPs = slices.Compact(c.node.nodeIPs)
	return nil
}

func (c *Controller) proxyConfig() buildConfig {
	cfg := &proxy.Config{
		DefaultScheduler:      c.cfg.DefaultScheduler,
		UnavailableSchedulers: c.unavailable,
		NoSchedulers:          c.cfg.NoSchedulers,
		NoHealthChecks:        c.cfg.NoSchedulers,
		Unhealthy:             c.checks.unhealthy,
		NodeName:              c.cfg.NodeName,
		NodeZone:              c.node.zone,
		NodeIPs:               c.node.nodeIPs,
		HostAddrs:             c.node.host,
	}
	return buildConfig{cfg: cfg, key: configKey(cfg)}
}

// updateState changes the desired state under stateMu, for concurrent readers.
func (c *Controller) updateState(name model.ServiceName, next *model.ServiceState) change {
	c.stateMu.Lock()
	defer c.stateMu.Unlock()
	return c.state.update(name, next)
}

// markDirtyLater queues a Service for the next sync (called from the sync goroutine).
func (c *Controller) markDirtyLater(name model.ServiceName) {
	c.mu.Lock()
	c.dirty[name] = true
	c.mu.Unlock()
	c.poke()
}

func sortedNames(m map[model.ServiceName]bool) []model.ServiceName {
	out := make([]model.ServiceName, 0, len(m))
	for n := range m {
		out = append(out, n)
	}
	sort.Slice(out, func(i, j int) bool { return nameLess(out[i], out[j]) })
	return out
}

// nameLess orders names as their String()s ("namespace/name") order, without building the
// strings: a full sync sorts every Service.
func nameLess(a, b model.ServiceName) bool {
	at := func(n model.ServiceName, i int) (byte, bool) {
		switch {
		case i < len(n.Namespace):
			return n.Namespace[i], true
		case i == len(n.Namespace):
			return '/', true
		case i-len(n.Namespace)-1 < len(n.Name):
			return n.Name[i-len(n.Namespace)-1], true
		}
		return 0, false
	}
	for i := 0; ; i++ {
		x, okA := at(a, i)
		y, okB := at(b, i)
		switch {
		case !okA || !okB:
			return !okA && okB
		case x != y:
			return x < y
		}
	}
}

func joinNames(ns []model.ServiceName) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = n.String()
	}
	sort.Strings(s)
	return strings.Join(s, ",")
}

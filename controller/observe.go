package controller

import (
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/kube-ipvs/kube-ipvs/dataplane"
	"github.com/kube-ipvs/kube-ipvs/healthcheck"
	"github.com/kube-ipvs/kube-ipvs/metrics"
	"github.com/kube-ipvs/kube-ipvs/model"
)

// Observers receive what the controller does. Every field is optional.
type Observers struct {
	Metrics       *metrics.Metrics
	ProxyHealth   *healthcheck.ProxyHealth
	ServiceHealth *healthcheck.ServiceHealth
	// FirstRepair is called once, after the first full sync whose firewall, addresses and
	// virtual servers were written as a whole (single objects may still be retried), and
	// after the metrics and health above heard of it: from then on the proxy's own rules
	// carry the node's Services (`kube-ipvs run --cleanup-kube-proxy` waits for it). It
	// runs on the sync goroutine, so it must not block.
	FirstRepair func()
}

// noteQueued records that a change of one kind (metrics.ChangeService, ChangeEndpoint or
// ChangeOther) waits for a sync: for /healthz's staleness rule, and kube-proxy's counters.
func (c *Controller) noteQueued(kind string, now time.Time) {
	if c.obs.ProxyHealth != nil {
		c.obs.ProxyHealth.QueuedUpdate(now)
	}
	if c.obs.Metrics != nil {
		c.obs.Metrics.QueuedChange(kind, now)
	}
}

// trigger is one EndpointSlice change waiting to be programmed: its last-change-trigger-time
// and the slice's address family (a metrics.IPv4 or IPv6 label value).
type trigger struct {
	at, family string
}

// noteFamilies tells the metrics which IP families this proxy serves: those the node has an
// address in, other than loopback and link-local ones (every node has ::1 and fe80::/64
// addresses, an IPv4-only node nothing else of IPv6). kube-proxy serves the same ones: a
// family it has a node IP in.
func (c *Controller) noteFamilies() {
	m := c.obs.Metrics
	if m == nil {
		return
	}
	var v4, v6 bool
	for a := range c.node.host {
		if a.IsGlobalUnicast() {
			v4, v6 = v4 || a.Is4(), v6 || a.Is6()
		}
	}
	var families []string
	if v4 || !v6 { // a node without any address is counted as IPv4, kube-proxy's default
		families = append(families, metrics.IPv4)
	}
	if v6 {
		families = append(families, metrics.IPv6)
	}
	if !slices.Equal(families, c.families) {
		c.families = families
		m.SetIPFamilies(families)
	}
}

// noteServiceChange counts a Service change as pending until a sync takes it.
func (c *Controller) noteServiceChange(svc model.ServiceName) {
	if c.obs.Metrics == nil {
		return
	}
	c.mu.Lock()
	c.pendingSvc[svc] = true
	c.obs.Metrics.SetChangesPending(len(c.pendingSvc), c.pendingEps)
	c.mu.Unlock()
}

// noteSliceChange counts an EndpointSlice change as pending, and remembers its
// last-change-trigger-time, to observe the network programming latency once the change is
// in the kernel. As kube-proxy does, a deleted slice drops its Service's waiting trigger
// times (its annotation is the time of its last update, not of the deletion), and FQDN
// slices, which no proxy programs, have none.
func (c *Controller) noteSliceChange(s *discoveryv1.EndpointSlice, svc model.ServiceName, deleted, newTrigger bool) {
	if c.obs.Metrics == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pendingEps++
	c.obs.Metrics.SetChangesPending(len(c.pendingSvc), c.pendingEps)
	if deleted {
		delete(c.triggers, svc)
		return
	}
	family := ""
	switch s.AddressType {
	case discoveryv1.AddressTypeIPv4:
		family = metrics.IPv4
	case discoveryv1.AddressTypeIPv6:
		family = metrics.IPv6
	}
	if t := s.Annotations[metrics.AnnotationLastChangeTriggerTime]; t != "" && family != "" && newTrigger {
		c.triggers[svc] = append(c.triggers[svc], trigger{at: t, family: family})
	}
}

// takePending zeroes the pending changes as a sync takes them; c.mu is held.
func (c *Controller) takePending() {
	if c.obs.Metrics == nil {
		return
	}
	clear(c.pendingSvc)
	c.pendingEps = 0
	c.obs.Metrics.SetChangesPending(0, 0)
}

func (c *Controller) noteNode(n *corev1.Node) {
	if c.obs.ProxyHealth != nil {
		c.obs.ProxyHealth.SyncNode(n)
	}
}

// noteResult counts a dataplane call's kernel writes and failures.
func (c *Controller) noteResult(r dataplane.Result) {
	m := c.obs.Metrics
	if m == nil {
		return
	}
	for op, n := range r.Ops {
		m.AddNetlinkWrites(op.Subsystem, op.Name, n)
	}
	for sub, n := range r.Failures {
		m.AddKernelErrors(sub, n)
	}
}

// noteSync reports a finished sync (res is what the dataplane did): metrics, proxy health,
// and the Service health servers. worked is the time the sync spent working: its duration,
// or for a repair cycle cut into steps the steps' time without the pauses between them
// (kube-proxy's sync duration is one sync's work; a cycle's wall time at scale is mostly
// changes applied between its steps). snapshot is when the sync took its set of changes:
// changes queued later are still pending. triggers are the EndpointSlice changes the sync
// took.
func (c *Controller) noteSync(full bool, st Stats, worked time.Duration, res dataplane.Result, snapshot time.Time, triggers map[model.ServiceName][]trigger) {
	now := time.Now()
	wholeFailed := full && res.Err != nil
	c.mu.Lock()
	pending := len(c.dirty)
	c.mu.Unlock()
	if ph := c.obs.ProxyHealth; ph != nil {
		if wholeFailed {
			ph.SyncFailed(now)
		} else {
			if full {
				ph.FullSyncTook(st.Duration)
			}
			ph.Updated(snapshot)
		}
	}
	if m := c.obs.Metrics; m != nil {
		m.SyncDone(full, st.Duration, !wholeFailed, now)
		m.KubeProxySyncDone(worked, res.Err == nil, now)
		m.SetPendingChanges(pending)
		m.SetDesiredState(metrics.DesiredState{VirtualServers: st.VirtualSrvrs, RealServers: c.state.reals, VIPs: len(c.state.bindRefs), IPSetEntries: c.setEntries})
		m.SetNoLocalEndpoints(c.state.noLocal)
		c.observeTriggers(m, res, triggers, now)
	}
	if sh := c.obs.ServiceHealth; sh != nil {
		ports := map[model.ServiceName]uint16{}
		local := map[model.ServiceName]int{}
		for name, s := range c.state.healthChecked {
			if s.HealthCheckNodePort != 0 {
				ports[name] = s.HealthCheckNodePort
				local[name] = s.LocalEndpoints
			}
		}
		errs := sh.SyncServices(ports)
		sh.SyncEndpoints(local)
		c.reportHealthPortErrors(errs)
	}
}

// observeTriggers records the network programming latency of the EndpointSlice changes a
// sync took, for the Services it programmed: a change is measured to the kernel, not to an
// attempt. The trigger times of a Service whose writes failed (one of its virtual servers
// or addresses, or a whole step) wait for the sync that gets it there, which retries it.
func (c *Controller) observeTriggers(m *metrics.Metrics, res dataplane.Result, triggers map[model.ServiceName][]trigger, now time.Time) {
	var failed []model.ServiceName
	for svc, ts := range triggers {
		if !c.programmed(svc, res) {
			failed = append(failed, svc)
			continue
		}
		for _, t := range ts {
			m.ObserveProgramming(t.at, t.family, now)
		}
	}
	if len(failed) == 0 {
		return
	}
	c.mu.Lock()
	for _, svc := range failed {
		c.triggers[svc] = append(triggers[svc], c.triggers[svc]...)
	}
	c.mu.Unlock()
}

// programmed reports whether res wrote everything of the Service's: no step failed as a
// whole, and none of its virtual servers or addresses failed. It looks at the failures, not
// at the Service's objects, so it costs nothing on a sync without failures.
func (c *Controller) programmed(svc model.ServiceName, res dataplane.Result) bool {
	if res.Err != nil {
		return false
	}
	for k := range res.FailedVS {
		if owner, ok := c.state.ownerOf(k); ok && owner == svc {
			return false
		}
	}
	if st := c.state.services[svc]; st != nil {
		for a := range res.FailedIP {
			if st.Binds(a) {
				return false
			}
		}
	}
	return true
}

// reportHealthPortErrors raises one Event per Service whose health-check node port cannot be
// bound, and again only when the error changes.
func (c *Controller) reportHealthPortErrors(errs map[model.ServiceName]error) {
	for name := range c.healthErr {
		if errs[name] == nil {
			delete(c.healthErr, name)
		}
	}
	for name, err := range errs {
		msg := err.Error()
		if c.healthErr[name] == msg {
			continue
		}
		c.healthErr[name] = msg
		c.log.Error("health check node port cannot be served", "service", name, "err", err)
		if svc, gerr := c.src.services.Services(name.Namespace).Get(name.Name); gerr == nil && c.recorder != nil {
			c.recorder.Eventf(svc, corev1.EventTypeWarning, "HealthCheckNodePortUnavailable",
				"cannot serve healthCheckNodePort %d: %v", svc.Spec.HealthCheckNodePort, err)
		}
	}
}

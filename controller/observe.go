package controller

import (
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

// noteQueued records that a change waits for a sync (for /healthz's staleness rule).
func (c *Controller) noteQueued(now time.Time) {
	if c.obs.ProxyHealth != nil {
		c.obs.ProxyHealth.QueuedUpdate(now)
	}
}

// noteSliceChange remembers an EndpointSlice's last-change-trigger-time, to observe the
// network programming latency once the change is in the kernel.
func (c *Controller) noteSliceChange(s *discoveryv1.EndpointSlice, svc model.ServiceName) {
	if c.obs.Metrics == nil {
		return
	}
	if t := s.Annotations[metrics.AnnotationLastChangeTriggerTime]; t != "" {
		c.mu.Lock()
		c.triggers[svc] = append(c.triggers[svc], t)
		c.mu.Unlock()
	}
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

// noteSync reports a finished sync: metrics, proxy health, and the Service health servers.
// snapshot is when the sync took its set of changes: changes queued later are still pending.
func (c *Controller) noteSync(full bool, st Stats, wholeFailed bool, snapshot time.Time, triggers map[model.ServiceName][]string) {
	now := time.Now()
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
		m.SetPendingChanges(pending)
		m.SetDesiredState(metrics.DesiredState{VirtualServers: st.VirtualSrvrs, RealServers: c.state.reals, VIPs: len(c.state.bindRefs), IPSetEntries: c.setEntries})
		if !wholeFailed {
			for _, ts := range triggers {
				for _, t := range ts {
					m.ObserveProgramming(t, now)
				}
			}
		}
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

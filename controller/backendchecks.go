package controller

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kube-ipvs/kube-ipvs/backendcheck"
	"github.com/kube-ipvs/kube-ipvs/dataplane"
	"github.com/kube-ipvs/kube-ipvs/metrics"
	"github.com/kube-ipvs/kube-ipvs/model"
)

// Backend health checks (package backendcheck) feed the controller as a change source:
// a verdict change queues its Service like an informer event (onVerdict), the next sync
// takes the verdicts into the controller's own table (takeVerdicts) and recomputes only
// that Service, and proxy.BuildService decides the weights from the Service, its slices
// and that table. A verdict change is therefore one small incremental write.

// Event reasons of the backend checks' state changes.
const (
	ReasonEndpointUnhealthy = "EndpointUnhealthy"
	ReasonEndpointHealthy   = "EndpointHealthy"
)

// checkEventGap is the shortest time between two state-change Events on one Service: a
// flapping endpoint must not flood the API server. Changes in between are logged and
// counted in the next Event.
const checkEventGap = 10 * time.Second

// backendChecks is the controller's side of the checks; only the sync goroutine uses it
// (verdicts, which onVerdict appends to, is under Controller.mu).
type backendChecks struct {
	checker *backendcheck.Checker // nil: no checks (iptables mode, --once, tests)
	// targets are the checked endpoints of each checked Service, as last computed.
	targets map[model.ServiceName]map[model.RSKey]bool
	// unhealthy is the verdict table proxy.Config.Unhealthy reads.
	unhealthy map[model.ServiceName]map[model.RSKey]bool
	// seeded: the kernel's weights were read after the start (seedFromKernel).
	seeded bool
	// Event rate limit per Service: when the next Event may go, and changes not shown.
	nextEvent  map[model.ServiceName]time.Time
	suppressed map[model.ServiceName]int
}

func newBackendChecks(ch *backendcheck.Checker) *backendChecks {
	return &backendChecks{checker: ch, targets: map[model.ServiceName]map[model.RSKey]bool{},
		unhealthy: map[model.ServiceName]map[model.RSKey]bool{},
		nextEvent: map[model.ServiceName]time.Time{}, suppressed: map[model.ServiceName]int{}}
}

// onVerdict is the checker's report: it queues the verdict and its Service for a sync.
func (c *Controller) onVerdict(v backendcheck.Verdict) {
	c.noteQueued(metrics.ChangeOther, time.Now())
	c.cfg.Gate.Raise() // before the mark, as markDirty does
	c.mu.Lock()
	c.verdicts = append(c.verdicts, v)
	c.dirty[v.Service] = true
	c.mu.Unlock()
	c.poke()
}

// takeVerdicts moves the queued verdicts into the table, logging each and raising
// rate-limited Events. Verdicts for endpoints no longer checked are stale and dropped.
func (c *Controller) takeVerdicts() {
	c.mu.Lock()
	vs := c.verdicts
	c.verdicts = nil
	c.mu.Unlock()
	b := c.checks
	for _, v := range vs {
		if !b.targets[v.Service][v.Endpoint] {
			continue
		}
		if v.Healthy {
			delete(b.unhealthy[v.Service], v.Endpoint)
			c.log.Info("endpoint passes its health check again; it gets its weight back", "service", v.Service, "endpoint", v.Endpoint)
		} else {
			if b.unhealthy[v.Service] == nil {
				b.unhealthy[v.Service] = map[model.RSKey]bool{}
			}
			b.unhealthy[v.Service][v.Endpoint] = true
			c.log.Warn("endpoint fails its health check; weight 0 (established connections stay)", "service", v.Service,
				"endpoint", v.Endpoint, "err", v.Err)
		}
		c.checkEvent(v)
	}
}

// checkEvent raises a verdict as an Event on its Service, at most one per checkEventGap.
func (c *Controller) checkEvent(v backendcheck.Verdict) {
	b := c.checks
	now := time.Now()
	if now.Before(b.nextEvent[v.Service]) {
		b.suppressed[v.Service]++
		return
	}
	svc, _ := c.src.serviceAndSlices(v.Service)
	if svc == nil || c.recorder == nil {
		return
	}
	b.nextEvent[v.Service] = now.Add(checkEventGap)
	more := ""
	if n := b.suppressed[v.Service]; n > 0 {
		more = fmt.Sprintf(" (%d earlier changes not shown as Events; see the proxy's log)", n)
		delete(b.suppressed, v.Service)
	}
	if v.Healthy {
		c.recorder.Eventf(svc, corev1.EventTypeNormal, ReasonEndpointHealthy, "endpoint %s passes its health check again; it gets its weight back%s", v.Endpoint, more)
		return
	}
	c.recorder.Eventf(svc, corev1.EventTypeWarning, ReasonEndpointUnhealthy, "endpoint %s fails its health check (%s); weight 0, established connections stay%s",
		v.Endpoint, v.Err, more)
}

// trackChecks follows a recomputed Service's check: its targets, the verdicts of endpoints
// that are no longer checked dropped, and the checker told (once the kernel was read).
func (c *Controller) trackChecks(name model.ServiceName, st *model.ServiceState) {
	b := c.checks
	if b.checker == nil {
		return
	}
	var hc *model.HealthCheck
	if st != nil {
		hc = st.HealthCheck
	}
	if hc == nil {
		if b.targets[name] != nil {
			delete(b.targets, name)
			delete(b.unhealthy, name)
			delete(b.nextEvent, name)
			delete(b.suppressed, name)
			b.checker.Remove(name)
		}
		return
	}
	set := make(map[model.RSKey]bool, len(hc.Targets))
	for _, ep := range hc.Targets {
		set[ep] = true
	}
	b.targets[name] = set
	for ep := range b.unhealthy[name] {
		if !set[ep] {
			delete(b.unhealthy[name], ep)
		}
	}
	if b.seeded {
		b.checker.Set(name, hc, b.unhealthy[name])
	}
}

// seedFromKernel runs once, in the first full sync, before the first repair: a checked
// endpoint that the kernel holds at weight 0 (a check had taken it out before the restart,
// or it drained) starts unhealthy, so a restart gives no failing endpoint its weight back
// before a check has passed. Others start healthy: the kubelet judged them ready, and
// holding every new endpoint back until it passes would slow every rollout. The checked
// Services are recomputed with those verdicts; then the checker learns every check.
func (c *Controller) seedFromKernel(pcfg buildConfig) {
	b := c.checks
	if b.checker == nil || b.seeded {
		return
	}
	b.seeded = true
	var keys []model.VSKey
	for name := range b.targets {
		for k, vs := range c.state.services[name].VSes {
			if vs.Key.Proto == model.TCP {
				keys = append(keys, k)
			}
		}
	}
	if len(keys) > 0 {
		weights, err := c.dp.RealWeights(keys)
		if err != nil {
			c.log.Warn("reading the kernel's weights of health-checked Services failed; their endpoints start healthy", "err", err)
		}
		var none dataplane.Change
		for _, name := range sortedNames(c.downInKernel(weights)) {
			c.recompute(name, pcfg, &none)
		}
	}
	for name := range b.targets {
		st := c.state.services[name]
		b.checker.Set(name, st.HealthCheck, b.unhealthy[name])
	}
}

// downInKernel records as unhealthy the checked endpoints at weight 0 in weights and
// returns their Services.
func (c *Controller) downInKernel(weights map[model.VSKey]map[model.RSKey]uint32) map[model.ServiceName]bool {
	b := c.checks
	changed := map[model.ServiceName]bool{}
	for k, reals := range weights {
		name, ok := c.state.ownerOf(k)
		if !ok {
			continue
		}
		for rs, w := range reals {
			if w != 0 || !b.targets[name][rs] {
				continue
			}
			if b.unhealthy[name] == nil {
				b.unhealthy[name] = map[model.RSKey]bool{}
			}
			b.unhealthy[name][rs] = true
			changed[name] = true
		}
	}
	return changed
}

// CheckStates returns what the backend checks know of each checked endpoint of a Service
// (nil: not checked), for `kube-ipvs explain` and debugging. Any goroutine may call it.
func (c *Controller) CheckStates(name model.ServiceName) []backendcheck.EndpointState {
	if c.checks.checker == nil {
		return nil
	}
	return c.checks.checker.Snapshot(name)
}

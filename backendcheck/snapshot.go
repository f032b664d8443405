package backendcheck

import (
	"sort"
	"time"

	"github.com/kube-ipvs/kube-ipvs/model"
)

// EndpointState is what the checker knows of one endpoint, for `kube-ipvs explain` and
// debugging.
type EndpointState struct {
	Endpoint model.RSKey
	Healthy  bool
	// Checks is the number of checks done; 0 means the state is the starting one (healthy,
	// or unhealthy as the kernel had it after a restart), not yet confirmed.
	Checks int
	// Passes and Fails count the current run towards a change of state.
	Passes, Fails int
	LastCheck     time.Time
	LastError     string
	NextCheck     time.Time // zero while a check runs
}

// Snapshot returns the state of every checked endpoint of a Service, sorted; nil when the
// Service is not checked.
func (c *Checker) Snapshot(name model.ServiceName) []EndpointState {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.services[name]
	if s == nil {
		return nil
	}
	out := make([]EndpointState, 0, len(s.targets))
	for _, t := range s.targets {
		e := EndpointState{Endpoint: t.ep, Healthy: t.h.healthy, Checks: t.h.checks, Passes: t.h.passes, Fails: t.h.fails,
			LastCheck: t.lastAt, LastError: t.lastErr}
		if !t.inflight {
			e.NextCheck = t.due
		}
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return model.RSKeyLess(out[i].Endpoint, out[j].Endpoint) })
	return out
}

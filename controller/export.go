package controller

import "github.com/kube-ipvs/kube-ipvs/model"

// DesiredServices returns the resolved desired state of every Service the proxy handles,
// for the local state endpoint: virtual servers another Service won are not in them, and
// the conflict is among their Reasons. The states are shared, not copied: a stored state
// is replaced on change, never modified, so callers must only read them. It may be
// called from any goroutine.
func (c *Controller) DesiredServices() []*model.ServiceState {
	c.stateMu.RLock()
	defer c.stateMu.RUnlock()
	out := make([]*model.ServiceState, 0, len(c.state.services))
	for _, st := range c.state.services {
		out = append(out, st)
	}
	return out
}

package ipvs

import (
	"maps"
	"time"

	"github.com/kube-ipvs/kube-ipvs/model"
)

// DrainDeadlines returns a copy of the draining real servers with the time each one is
// deleted at the latest, for the local state endpoint. It may be called from any goroutine.
func (r *Reconciler) DrainDeadlines() map[model.VSKey]map[model.RSKey]time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[model.VSKey]map[model.RSKey]time.Time, len(r.draining))
	for k, m := range r.draining {
		out[k] = maps.Clone(m)
	}
	return out
}

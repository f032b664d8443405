package ipvsmode

import (
	"time"

	"github.com/kube-ipvs/kube-ipvs/model"
)

// DrainDeadlines are the real servers draining at weight 0 and their deadlines, for the
// local state endpoint; any goroutine may call it.
func (d *Dataplane) DrainDeadlines() map[model.VSKey]map[model.RSKey]time.Time {
	return d.p.IPVS.DrainDeadlines()
}

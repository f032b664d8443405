package iptproxy

import (
	"sort"
	"sync"

	"github.com/kube-ipvs/kube-ipvs/dataplane"
	"github.com/kube-ipvs/kube-ipvs/model"
)

// FlowTracker remembers the endpoints of every UDP virtual server, so that iptables mode
// clears the conntrack entries IPVS mode would clear: a UDP flow's DNAT binding lives in its
// conntrack entry, and without the clearing a client that keeps sending from one port keeps
// reaching an endpoint that was removed, or a Service that was deleted, or (after it had no
// endpoints) no endpoint at all. It writes nothing.
//
// It reports, like the IPVS reconciler (dataplane.UDPFlows):
//   - Removed: an endpoint that left a UDP virtual server, or every endpoint of a UDP
//     virtual server that went away;
//   - First: a UDP virtual server that went from no endpoint to some.
//
// The first Resync only learns: what the rules held before a restart is not known, and
// clearing every UDP flow of the node on each restart would move established flows.
//
// A flow cleared while the rules still send it the old way (their restore failed) is
// recreated the old way by its next packet. So after FirewallFailed the next Resync, which
// the controller runs after repairing the rules, reports again what was reported since the
// previous Resync.
type FlowTracker struct {
	mu      sync.Mutex
	reals   map[model.VSKey]map[model.RSKey]uint32 // UDP virtual servers with endpoints (read-only maps)
	learned bool
	// Reported since the last Resync, and whether a firewall step failed meanwhile.
	removedSince []dataplane.RealServerRef
	firstSince   []model.VSKey
	replay       bool
}

// NewFlowTracker returns an empty FlowTracker.
func NewFlowTracker() *FlowTracker {
	return &FlowTracker{reals: map[model.VSKey]map[model.RSKey]uint32{}}
}

// Apply records the changed virtual servers (nil: gone) and reports the flows to clear.
func (u *FlowTracker) Apply(changes map[model.VSKey]*model.VirtualServer) dataplane.UDPFlows {
	u.mu.Lock()
	defer u.mu.Unlock()
	res := dataplane.UDPFlows{}
	for _, key := range sortedUDPKeys(changes) {
		u.set(key, changes[key], &res, true)
	}
	u.removedSince = append(u.removedSince, res.Removed...)
	u.firstSince = append(u.firstSince, res.First...)
	return res
}

// FirewallFailed makes the next Resync report again what was reported since the last one.
func (u *FlowTracker) FirewallFailed() {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.replay = true
}

// Resync records desired as the whole state: virtual servers it lacks are gone.
func (u *FlowTracker) Resync(desired map[model.VSKey]*model.VirtualServer) dataplane.UDPFlows {
	u.mu.Lock()
	defer u.mu.Unlock()
	changes := make(map[model.VSKey]*model.VirtualServer, len(u.reals))
	for key := range u.reals {
		changes[key] = nil
	}
	for key, vs := range desired {
		if key.Proto == model.UDP {
			changes[key] = vs
		}
	}
	res := dataplane.UDPFlows{}
	if u.replay {
		res.Removed = append(res.Removed, u.removedSince...)
		res.First = append(res.First, u.firstSince...)
	}
	for _, key := range sortedUDPKeys(changes) {
		u.set(key, changes[key], &res, u.learned)
	}
	u.learned, u.replay = true, false
	u.removedSince, u.firstSince = nil, nil
	return res
}

func (u *FlowTracker) set(key model.VSKey, vs *model.VirtualServer, res *dataplane.UDPFlows, report bool) {
	old := u.reals[key]
	var now map[model.RSKey]uint32
	if vs != nil && len(vs.Reals) > 0 {
		now = vs.Reals // read-only (model.VirtualServer): kept, not copied
	}
	if report {
		var gone []model.RSKey
		for rs := range old {
			if _, ok := now[rs]; !ok {
				gone = append(gone, rs)
			}
		}
		sort.Slice(gone, func(i, j int) bool { return model.RSKeyLess(gone[i], gone[j]) })
		for _, rs := range gone {
			res.Removed = append(res.Removed, dataplane.RealServerRef{VS: key, RS: rs})
		}
		if len(old) == 0 && len(now) > 0 {
			res.First = append(res.First, key)
		}
	}
	if now == nil {
		delete(u.reals, key)
	} else {
		u.reals[key] = now
	}
}

// sortedUDPKeys returns the UDP keys of m in order, so results are deterministic.
func sortedUDPKeys(m map[model.VSKey]*model.VirtualServer) []model.VSKey {
	keys := make([]model.VSKey, 0, len(m))
	for k := range m {
		if k.Proto == model.UDP {
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(i, j int) bool { return model.VSKeyLess(keys[i], keys[j]) })
	return keys
}

package proxy

import "github.com/kube-ipvs/kube-ipvs/model"

// selectReals picks the real servers of one virtual server from the endpoints of its port
// and family. local selects the node-local policy (externalTrafficPolicy or
// internalTrafficPolicy Local, depending on the virtual server).
//
// The order of the rules matters and follows kube-proxy:
//   - Locality first: with a Local policy, ready endpoints elsewhere do not count, so a
//     node whose only local pod is terminating still serves it (KEP-1669).
//   - Ready endpoints if there are any; otherwise the ones still serving while terminating,
//     so a rollout of the last replica drains instead of dropping connections.
//   - Topology hints only for cluster-wide policies and only among ready endpoints: they are
//     about spreading healthy load, and a Local policy already keeps traffic on the node.
func selectReals(eps []endpoint, local bool, cfg *Config) map[model.RSKey]uint32 {
	nReady, nFallback := 0, 0
	allNodeHinted, allZoneHinted := true, true // among the ready
	for i := range eps {
		switch e := &eps[i]; {
		case local && !e.local:
		case e.ready:
			nReady++
			allNodeHinted = allNodeHinted && e.nodeHinted
			allZoneHinted = allZoneHinted && e.zoneHinted
		case e.serving && e.terminating:
			nFallback++
		}
	}
	useReady := nReady > 0
	// Hints are used only when every ready endpoint has them (filterHinted).
	hints := (cfg.NodeName != "" && allNodeHinted) || (cfg.NodeZone != "" && allZoneHinted)
	if useReady && !local && hints {
		var ready []endpoint
		for _, e := range eps {
			if e.ready {
				ready = append(ready, e)
			}
		}
		chosen := applyTopology(ready, cfg)
		reals := make(map[model.RSKey]uint32, len(chosen))
		for _, e := range chosen {
			reals[e.rs] = 1
		}
		return reals
	}
	// No topology to apply: the chosen go straight into the map, without a list of them
	// first (a full sync selects for every Service).
	n := nFallback
	if useReady {
		n = nReady
	}
	reals := make(map[model.RSKey]uint32, n)
	for i := range eps {
		e := &eps[i]
		switch {
		case local && !e.local:
		case useReady && e.ready, !useReady && e.serving && e.terminating:
			reals[e.rs] = 1
		}
	}
	return reals
}

// applyTopology narrows ready endpoints by their hints. Hints are honoured only when every
// endpoint has them (otherwise the controller is mid-update or did not hint this Service)
// and at least one is meant for us (otherwise we would be left with nothing and must use
// everything). Node hints are more specific than zone hints, so they are tried first.
func applyTopology(ready []endpoint, cfg *Config) []endpoint {
	if cfg.NodeName != "" {
		if kept := filterHinted(ready, func(e *endpoint) (bool, bool) { return e.nodeHinted, e.forMyNode }); kept != nil {
			return kept
		}
	}
	if cfg.NodeZone != "" {
		if kept := filterHinted(ready, func(e *endpoint) (bool, bool) { return e.zoneHinted, e.forMyZone }); kept != nil {
			return kept
		}
	}
	return ready
}

// filterHinted returns the endpoints hinted for us, or nil if the hints cannot be used:
// some endpoint has none, or none is for us.
func filterHinted(eps []endpoint, hint func(*endpoint) (hinted, forMe bool)) []endpoint {
	n := 0
	for i := range eps {
		hinted, forMe := hint(&eps[i])
		if !hinted {
			return nil
		}
		if forMe {
			n++
		}
	}
	if n == 0 {
		return nil
	}
	kept := make([]endpoint, 0, n)
	for i := range eps {
		if _, forMe := hint(&eps[i]); forMe {
			kept = append(kept, eps[i])
		}
	}
	return kept
}

package proxy

import "github.com/kube-ipvs/kube-ipvs/model"

// appendChoices records how selectReals judged each endpoint of one port, family and
// policy: chosen ones, and for every other one the rule of selectReals that left it out.
// It restates those rules rather than instrumenting selectReals, so that the selection
// stays as simple as it is; TestChoicesAgreeWithSelection keeps the two in step.
func appendChoices(dst []model.EndpointChoice, eps []endpoint, reals map[model.RSKey]uint32, portName string, local bool, cfg *Config) []model.EndpointChoice {
	haveReady := false
	for i := range eps {
		if eps[i].ready && (!local || eps[i].local) {
			haveReady = true
			break
		}
	}
	for i := range eps {
		e := &eps[i]
		_, chosen := reals[e.rs]
		c := model.EndpointChoice{PortName: portName, Local: local, RS: e.rs, Pod: e.pod, Node: e.node, Chosen: chosen}
		switch {
		case chosen && !e.ready:
			c.Why = model.WhyFallback
		case chosen:
		default:
			c.Why = whyLeftOut(e, local, haveReady, cfg)
		}
		dst = append(dst, c)
	}
	return dst
}

// whyLeftOut names the selection rule that left out an endpoint selectReals did not choose.
func whyLeftOut(e *endpoint, local, haveReady bool, cfg *Config) string {
	switch {
	case local && !e.local:
		return model.WhyOtherNode
	case e.ready:
		// Only the topology hints drop a ready endpoint of a cluster-wide policy.
		if cfg.NodeName != "" && e.nodeHinted && !e.forMyNode {
			return model.WhyTopologyNode
		}
		return model.WhyTopologyZone
	case e.serving && e.terminating && haveReady:
		return model.WhyTerminatingSpare
	case e.terminating:
		return model.WhyTerminating
	}
	return model.WhyNotReady
}

// FlagNames names the scheduler flags of a spec as the annotation does (sh-fallback,
// mh-port, ...), for list and explain; flags that scheduler has no name for are left out.
func FlagNames(sched string, flags uint32) []string {
	var out []string
	for _, f := range schedulerFlags {
		if f.scheduler == sched && flags&f.bit != 0 {
			out = append(out, f.name)
		}
	}
	return out
}

package proxy

import (
	"cmp"
	"slices"
	"strconv"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/kube-ipvs/kube-ipvs/model"
)

// endpoint is one candidate real server of one Service port, with everything the selection
// rules need already resolved against this node.
type endpoint struct {
	rs          model.RSKey
	ready       bool
	serving     bool
	terminating bool
	local       bool   // on this node: only these serve a Local traffic policy
	zoneHinted  bool   // has hints.forZones
	forMyZone   bool   // hints.forZones names cfg.NodeZone
	nodeHinted  bool   // has hints.forNodes
	forMyNode   bool   // hints.forNodes names cfg.NodeName
	pod, node   string // targetRef Pod name and nodeName, for explain ("" if unset)
}

// rank orders copies of the same address+port found in several slices (during a slice
// rebalance the controller can briefly list an endpoint twice): the most usable copy wins.
func (e *endpoint) rank() int {
	switch {
	case e.ready:
		return 2
	case e.serving && e.terminating:
		return 1
	}
	return 0
}

// serviceSlices keeps the slices that belong to svc and carry IP addresses, sorted by name
// so that duplicates and problems resolve the same way whatever order the caller used. The
// caller should pass only this Service's slices; checking again costs little and a slice of
// another Service would send its traffic to the wrong pods.
func serviceSlices(svc *v1.Service, all []*discoveryv1.EndpointSlice) []*discoveryv1.EndpointSlice {
	out := make([]*discoveryv1.EndpointSlice, 0, len(all))
	for _, s := range all {
		if s == nil || s.Namespace != svc.Namespace || s.Labels[discoveryv1.LabelServiceName] != svc.Name {
			continue
		}
		// FQDN slices name hosts, which IPVS cannot balance to.
		if s.AddressType != discoveryv1.AddressTypeIPv4 && s.AddressType != discoveryv1.AddressTypeIPv6 {
			continue
		}
		// A slice labelled service.kubernetes.io/headless is not the proxy's, whatever its
		// Service: kube-proxy's EndpointSlice informer leaves such slices out (its selector is
		// !service.kubernetes.io/headless), so labelling a slice takes its endpoints out of the
		// Service (Kubernetes' e2e "Services should implement service.kubernetes.io/headless").
		if _, ok := s.Labels[v1.IsHeadlessService]; ok {
			continue
		}
		out = append(out, s)
	}
	slices.SortStableFunc(out, func(a, b *discoveryv1.EndpointSlice) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// protocolOr returns the protocol, or TCP (the API default) when unset.
func protocolOr(p v1.Protocol) v1.Protocol {
	if p == "" {
		return v1.ProtocolTCP
	}
	return p
}

// slicePort finds the slice port that serves service port sp. The match is by name and
// protocol, not number: the number is the pod's target port, which may differ per slice
// when targetPort names a container port.
func slicePort(s *discoveryv1.EndpointSlice, sp *v1.ServicePort) (discoveryv1.EndpointPort, bool) {
	for _, p := range s.Ports {
		name := ""
		if p.Name != nil {
			name = *p.Name
		}
		proto := v1.ProtocolTCP
		if p.Protocol != nil {
			proto = protocolOr(*p.Protocol)
		}
		if name == sp.Name && proto == protocolOr(sp.Protocol) {
			return p, true
		}
	}
	return discoveryv1.EndpointPort{}, false
}

// collectEndpoints returns the endpoints of service port sp whose addresses have the given
// family, merged across slices by address+port.
func collectEndpoints(slcs []*discoveryv1.EndpointSlice, sp *v1.ServicePort, is6 bool, cfg *Config, probs *problems) []endpoint {
	want := discoveryv1.AddressTypeIPv4
	if is6 {
		want = discoveryv1.AddressTypeIPv6
	}
	// Sized once for every endpoint of the slices: a full sync builds every Service, and
	// growing the list (and a map to find repeats) cost more than the list itself.
	n := 0
	for _, s := range slcs {
		n += len(s.Endpoints)
	}
	out := make([]endpoint, 0, n)
	var index map[model.RSKey]int // only for many endpoints; fewer are searched
	if n > smallEndpoints {
		index = make(map[model.RSKey]int, n)
	}
	for _, s := range slcs {
		if s.AddressType != want {
			continue
		}
		p, ok := slicePort(s, sp)
		if !ok {
			continue
		}
		if p.Port == nil || *p.Port < 1 || *p.Port > 65535 {
			probs.add(ReasonInvalidEndpoint, "EndpointSlice %s port %q has number %s, not 1..65535; its endpoints are not used", s.Name, sp.Name, fmtInt32Ptr(p.Port))
			continue
		}
		for i := range s.Endpoints {
			e, ok := newEndpoint(s, i, uint16(*p.Port), is6, cfg, probs)
			if !ok {
				continue
			}
			if at := findEndpoint(out, index, e.rs); at >= 0 {
				if e.rank() > out[at].rank() {
					out[at] = e
				}
				continue
			}
			if index != nil {
				index[e.rs] = len(out)
			}
			out = append(out, e)
		}
	}
	return out
}

// smallEndpoints is how many endpoints a port may have for repeats to be found by looking
// through the list rather than in a map.
const smallEndpoints = 32

// findEndpoint returns where rs is in eps (-1: not there), through index when there is one.
func findEndpoint(eps []endpoint, index map[model.RSKey]int, rs model.RSKey) int {
	if index != nil {
		if at, ok := index[rs]; ok {
			return at
		}
		return -1
	}
	for i := range eps {
		if eps[i].rs == rs {
			return i
		}
	}
	return -1
}

// newEndpoint reads endpoint i of slice s. Only the first address is used: the API says
// the addresses of one endpoint are fungible and consumers may use just the first.
func newEndpoint(s *discoveryv1.EndpointSlice, i int, port uint16, is6 bool, cfg *Config, probs *problems) (endpoint, bool) {
	ep := &s.Endpoints[i]
	if len(ep.Addresses) == 0 {
		return endpoint{}, false
	}
	a, err := ParseIP(ep.Addresses[0])
	if err != nil {
		probs.add(ReasonInvalidEndpoint, "EndpointSlice %s endpoints[%d].addresses[0] %q %v; the endpoint is not used", s.Name, i, ep.Addresses[0], err)
		return endpoint{}, false
	}
	if a.Is6() != is6 {
		probs.add(ReasonInvalidEndpoint, "EndpointSlice %s has addressType %s but endpoints[%d].addresses[0] is %q; the endpoint is not used", s.Name, s.AddressType, i, ep.Addresses[0])
		return endpoint{}, false
	}

	// Unset conditions: ready defaults to true (the API's "unknown, assume ready"),
	// serving to the ready value, terminating to false.
	ready := ep.Conditions.Ready == nil || *ep.Conditions.Ready
	serving := ready
	if ep.Conditions.Serving != nil {
		serving = *ep.Conditions.Serving
	}
	terminating := ep.Conditions.Terminating != nil && *ep.Conditions.Terminating

	e := endpoint{
		rs:          model.RSKey{Addr: a, Port: port},
		ready:       ready,
		serving:     serving,
		terminating: terminating,
		local:       cfg.NodeName != "" && ep.NodeName != nil && *ep.NodeName == cfg.NodeName,
	}
	if ep.TargetRef != nil && ep.TargetRef.Kind == "Pod" {
		e.pod = ep.TargetRef.Name
	}
	if ep.NodeName != nil {
		e.node = *ep.NodeName
	}
	if h := ep.Hints; h != nil {
		e.zoneHinted = len(h.ForZones) > 0
		for _, z := range h.ForZones {
			if cfg.NodeZone != "" && z.Name == cfg.NodeZone {
				e.forMyZone = true
			}
		}
		e.nodeHinted = len(h.ForNodes) > 0
		for _, n := range h.ForNodes {
			if cfg.NodeName != "" && n.Name == cfg.NodeName {
				e.forMyNode = true
			}
		}
	}
	return e, true
}

// fmtInt32Ptr renders an optional number for a Problem message.
func fmtInt32Ptr(p *int32) string {
	if p == nil {
		return "unset"
	}
	return strconv.Itoa(int(*p))
}

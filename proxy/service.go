package proxy

import (
	"net/netip"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/kube-ipvs/kube-ipvs/model"
)

// LabelServiceProxyName marks a Service as handled by another proxy: every proxy that does
// not own the name, including kube-proxy, leaves the Service alone.
const LabelServiceProxyName = "service.kubernetes.io/service-proxy-name"

// BuildService returns the desired IPVS state of svc on this node, or nil when the proxy
// must not handle svc at all. It never fails: bad input is skipped and reported in
// ServiceState.Reasons, so one broken field costs only the virtual servers it affects.
//
// slices should be the EndpointSlices of svc; slices of other Services are ignored. The
// inputs are not modified.
func BuildService(svc *v1.Service, slices []*discoveryv1.EndpointSlice, cfg *Config) *model.ServiceState {
	if svc == nil || ignored(svc) {
		return nil
	}
	if cfg == nil {
		cfg = &Config{}
	}
	var probs problems
	st := &model.ServiceState{
		Name: model.ServiceName{Namespace: svc.Namespace, Name: svc.Name},
		VSes: map[model.VSKey]*model.VirtualServer{},
		Bind: map[netip.Addr]bool{},
	}

	// One spec for every virtual server of the Service: the scheduler, its flags and
	// affinity are Service-wide settings.
	sched := scheduler(svc, cfg, &probs)
	spec := model.VSSpec{Scheduler: sched, Flags: schedulerFlagBits(svc, sched, &probs)}
	affFlags, timeout := affinity(svc, &probs)
	spec.Flags |= affFlags
	spec.Timeout = timeout

	vips := collectVIPs(svc, &probs)
	nodeIPs := nodeVIPs(cfg)
	itpLocal := svc.Spec.InternalTrafficPolicy != nil && *svc.Spec.InternalTrafficPolicy == v1.ServiceInternalTrafficPolicyLocal
	etpLocal := svc.Spec.ExternalTrafficPolicy == v1.ServiceExternalTrafficPolicyLocal
	own := serviceSlices(svc, slices)

	for i := range svc.Spec.Ports {
		sp := &svc.Spec.Ports[i]
		proto, ok := protocolOf(sp, i, &probs)
		if !ok {
			continue
		}
		if sp.Port < 1 || sp.Port > 65535 {
			probs.add(ReasonInvalidPort, "spec.ports[%d] (name %q) port %d is not in 1..65535; the port is skipped", i, sp.Name, sp.Port)
			continue
		}
		pb := portBuilder{st: st, spec: spec, proto: proto, sp: sp, slices: own, cfg: cfg, probs: &probs}

		// Order matters only if two sources name the same address and port (a
		// misconfiguration): the first one wins, ClusterIP before external sources.
		pb.add(vips.cluster, uint16(sp.Port), itpLocal, true)
		pb.add(vips.external, uint16(sp.Port), etpLocal, true)
		pb.add(vips.lb, uint16(sp.Port), etpLocal, true)
		switch {
		case sp.NodePort == 0:
		case sp.NodePort < 1 || sp.NodePort > 65535:
			probs.add(ReasonInvalidPort, "spec.ports[%d] (name %q) nodePort %d is not in 1..65535; no NodePort virtual servers for it", i, sp.Name, sp.NodePort)
		default:
			// Node IPs are the node's own: they are already on an interface and must
			// not be bound to kube-ipvs0 (removing them later would cut the node off).
			pb.add(nodeIPs, uint16(sp.NodePort), etpLocal, false)
		}
	}
	if etpLocal && svc.Spec.HealthCheckNodePort > 0 && svc.Spec.HealthCheckNodePort <= 65535 {
		st.HealthCheckNodePort = uint16(svc.Spec.HealthCheckNodePort)
		st.LocalEndpoints = localReadyEndpoints(own, cfg.NodeName)
	}
	st.Reasons = probs.result()
	return st
}

// localReadyEndpoints counts the distinct ready endpoints on this node, the number a load
// balancer's health check of an externalTrafficPolicy=Local Service is told.
func localReadyEndpoints(slices []*discoveryv1.EndpointSlice, node string) int {
	seen := map[string]bool{}
	for _, s := range slices {
		for _, e := range s.Endpoints {
			if e.NodeName == nil || *e.NodeName != node || len(e.Addresses) == 0 {
				continue
			}
			if e.Conditions.Ready != nil && !*e.Conditions.Ready {
				continue
			}
			seen[e.Addresses[0]] = true
		}
	}
	return len(seen)
}

// ignored reports whether the proxy must leave svc alone, as kube-proxy does: ExternalName
// Services are DNS only, headless Services have no virtual address, and Services labelled
// with a service-proxy-name belong to another proxy. A Service without any ClusterIP yet is
// not ready to be proxied either.
func ignored(svc *v1.Service) bool {
	if _, other := svc.Labels[LabelServiceProxyName]; other {
		return true
	}
	if svc.Spec.Type == v1.ServiceTypeExternalName {
		return true
	}
	if svc.Spec.ClusterIP == v1.ClusterIPNone || (len(svc.Spec.ClusterIPs) > 0 && svc.Spec.ClusterIPs[0] == v1.ClusterIPNone) {
		return true
	}
	return svc.Spec.ClusterIP == "" && len(svc.Spec.ClusterIPs) == 0
}

// Protocol maps a Service port protocol to the IPVS one; an unset protocol is TCP, the API
// default. false: IPVS cannot carry it.
func Protocol(p v1.Protocol) (model.Protocol, bool) {
	switch protocolOr(p) {
	case v1.ProtocolTCP:
		return model.TCP, true
	case v1.ProtocolUDP:
		return model.UDP, true
	case v1.ProtocolSCTP:
		return model.SCTP, true
	}
	return 0, false
}

// protocolOf is Protocol for one of a Service's ports, reporting one IPVS cannot carry.
func protocolOf(sp *v1.ServicePort, i int, probs *problems) (model.Protocol, bool) {
	if p, ok := Protocol(sp.Protocol); ok {
		return p, true
	}
	probs.add(ReasonUnsupportedProtocol, "spec.ports[%d] (name %q) protocol %q is not supported by IPVS (TCP, UDP, SCTP); the port is skipped", i, sp.Name, sp.Protocol)
	return 0, false
}

// portBuilder adds the virtual servers of one Service port. It computes the real servers
// once per (family, policy) and gives every virtual server of that family and policy the
// same map (read-only, see model.VirtualServer): a Service with many addresses would
// otherwise walk its endpoints, and hold a copy of them, once per address.
type portBuilder struct {
	st     *model.ServiceState
	spec   model.VSSpec
	proto  model.Protocol
	sp     *v1.ServicePort
	slices []*discoveryv1.EndpointSlice
	cfg    *Config
	probs  *problems

	eps      [2][]endpoint // by family: 0 IPv4, 1 IPv6
	epsDone  [2]bool
	reals    [2][2]map[model.RSKey]uint32 // by family, then policy: 0 cluster, 1 local
	realDone [2][2]bool
}

// add creates a virtual server on each address at port, with the endpoints of the
// address's family under the given policy; bind says whether the addresses go to
// kube-ipvs0.
func (pb *portBuilder) add(addrs []netip.Addr, port uint16, local, bind bool) {
	for _, a := range addrs {
		key := model.VSKey{Addr: a, Proto: pb.proto, Port: port}
		if _, dup := pb.st.VSes[key]; dup {
			continue
		}
		pb.st.VSes[key] = &model.VirtualServer{Key: key, Spec: pb.spec, Reals: pb.realsFor(a.Is6(), local), PortName: pb.sp.Name}
		if bind {
			pb.st.Bind[a] = true
		}
	}
}

func (pb *portBuilder) realsFor(is6, local bool) map[model.RSKey]uint32 {
	f, p := b2i(is6), b2i(local)
	if !pb.realDone[f][p] {
		if !pb.epsDone[f] {
			pb.eps[f] = collectEndpoints(pb.slices, pb.sp, is6, pb.cfg, pb.probs)
			pb.epsDone[f] = true
		}
		pb.reals[f][p] = selectReals(pb.eps[f], local, pb.cfg)
		pb.realDone[f][p] = true
	}
	return pb.reals[f][p]
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

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
// inputs are not modified, and must not be afterwards: the state's Choices reads the slices
// again when asked (the informers' objects are never modified).
func BuildService(svc *v1.Service, slices []*discoveryv1.EndpointSlice, cfg *Config) *model.ServiceState {
	if svc == nil || ignored(svc) {
		return nil
	}
	if cfg == nil {
		cfg = &Config{}
	}
	var probs problems
	etpLocal := svc.Spec.ExternalTrafficPolicy == v1.ServiceExternalTrafficPolicyLocal
	st := &model.ServiceState{
		Name:          model.ServiceName{Namespace: svc.Namespace, Name: svc.Name},
		VSes:          map[model.VSKey]*model.VirtualServer{},
		LoadBalancer:  svc.Spec.Type == v1.ServiceTypeLoadBalancer,
		ExternalLocal: etpLocal,
		SourceRanges:  SourceRangesOf(svc),
	}
	vips := collectVIPs(svc, cfg, &probs)
	pb := portBuilder{st: st, spec: serviceSpec(svc, cfg, &probs), health: healthCheck(svc, cfg, &probs),
		slices: serviceSlices(svc, slices), cfg: cfg, probs: &probs,
		itpLocal: svc.Spec.InternalTrafficPolicy != nil && *svc.Spec.InternalTrafficPolicy == v1.ServiceInternalTrafficPolicyLocal,
		etpLocal: etpLocal, vips: vips, nodeIPs: nodeVIPs(cfg, serviceFamilies(svc, vips.cluster)), svcPorts: svc.Spec.Ports}
	if hc := svc.Spec.HealthCheckNodePort; hc > 0 && hc <= 65535 {
		pb.healthCheckNodePort = uint16(hc)
	}
	pb.choices = &choiceSource{slices: pb.slices, nodeName: cfg.NodeName, nodeZone: cfg.NodeZone}
	for i := range svc.Spec.Ports {
		pb.addPort(i, &svc.Spec.Ports[i])
	}
	if len(pb.choices.ports) > 0 {
		st.Choices = pb.choices
	}
	if etpLocal && svc.Spec.HealthCheckNodePort > 0 && svc.Spec.HealthCheckNodePort <= 65535 {
		st.HealthCheckNodePort = uint16(svc.Spec.HealthCheckNodePort)
		st.LocalEndpoints = localReadyEndpoints(pb.slices, cfg.NodeName)
	}
	if pb.health != nil {
		pb.health.Targets = checkTargets(st)
		st.HealthCheck = pb.health
	}
	st.Reasons = probs.result()
	return st
}

// serviceSpec is the one spec of every virtual server of the Service: the scheduler, its
// flags and affinity are Service-wide settings.
func serviceSpec(svc *v1.Service, cfg *Config, probs *problems) model.VSSpec {
	sched := scheduler(svc, cfg, probs)
	spec := model.VSSpec{Scheduler: sched, Flags: schedulerFlagBits(svc, sched, probs)}
	affFlags, timeout := affinity(svc, probs)
	spec.Flags |= affFlags
	spec.Timeout = timeout
	return spec
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

// portBuilder adds the virtual servers of a Service's ports. It computes the real servers
// once per port and (family, policy) and gives every virtual server of that family and
// policy the same map (read-only, see model.VirtualServer): a Service with many addresses
// would otherwise walk its endpoints, and hold a copy of them, once per address.
type portBuilder struct {
	st                 *model.ServiceState
	spec               model.VSSpec
	health             *model.HealthCheck // nil: the endpoints are not checked
	slices             []*discoveryv1.EndpointSlice
	cfg                *Config
	probs              *problems
	itpLocal, etpLocal bool
	vips               serviceVIPs
	nodeIPs            []netip.Addr
	svcPorts           []v1.ServicePort
	choices            *choiceSource // the Service's, filled by realsFor
	// healthCheckNodePort is the Service's, if valid: the in-cluster mark of a port without a
	// node port (model.InClusterMark).
	healthCheckNodePort uint16

	// Per port, reset by addPort.
	sp       *v1.ServicePort
	proto    model.Protocol
	eps      [2][]endpoint // by family: 0 IPv4, 1 IPv6
	epsDone  [2]bool
	reals    [2][2]map[model.RSKey]uint32 // by family, then policy: 0 cluster, 1 local
	realDone [2][2]bool
	external []*model.VirtualServer // the port's virtual servers under externalTrafficPolicy: Local
}

// addPort adds the virtual servers of spec.ports[i]. Order matters only if two sources name
// the same address and port (a misconfiguration, reported): the first one wins, ClusterIP
// before external sources.
func (pb *portBuilder) addPort(i int, sp *v1.ServicePort) {
	proto, ok := protocolOf(sp, i, pb.probs)
	if !ok {
		return
	}
	if sp.Port < 1 || sp.Port > 65535 {
		pb.probs.add(ReasonInvalidPort, "spec.ports[%d] (name %q) port %d is not in 1..65535; the port is skipped", i, sp.Name, sp.Port)
		return
	}
	pb.sp, pb.proto = sp, proto
	pb.reportDuplicates(i, sp, proto)
	pb.epsDone, pb.realDone, pb.external = [2]bool{}, [2][2]bool{}, pb.external[:0]
	pb.add(pb.vips.cluster, uint16(sp.Port), model.KindClusterIP, pb.itpLocal)
	pb.add(pb.vips.external, uint16(sp.Port), model.KindExternalIP, pb.etpLocal)
	pb.add(pb.vips.lb, uint16(sp.Port), model.KindLoadBalancer, pb.etpLocal)
	switch {
	case sp.NodePort == 0:
	case sp.NodePort < 1 || sp.NodePort > 65535:
		pb.probs.add(ReasonInvalidPort, "spec.ports[%d] (name %q) nodePort %d is not in 1..65535; no NodePort virtual servers for it", i, sp.Name, sp.NodePort)
	default:
		pb.add(pb.nodeIPs, uint16(sp.NodePort), model.KindNodePort, pb.etpLocal)
	}
	pb.addInCluster(i, sp)
}

// addInCluster gives in-cluster clients (pods, the node) of an externalTrafficPolicy: Local
// port every endpoint, as Kubernetes wants, while outside clients keep only the local ones
// and their address: each external virtual server of the port gets the port's mark
// (model.InClusterMark), which the firewall sets on in-cluster traffic to it, and each of
// their families a firewall-mark virtual server of that mark with the endpoints of the
// cluster policy. kube-proxy's IPVS mode instead gives the address virtual servers every
// endpoint when none is local, which sends outside clients to other nodes unmasqueraded.
func (pb *portBuilder) addInCluster(i int, sp *v1.ServicePort) {
	if len(pb.external) == 0 {
		return
	}
	mark := model.InClusterMark(pb.healthCheckNodePort, pb.proto, i)
	if sp.NodePort >= 1 && sp.NodePort <= 65535 {
		mark = model.InClusterMark(uint16(sp.NodePort), pb.proto, -1)
	}
	if mark == 0 {
		return // no node port to derive a mark from: in-cluster clients get the local endpoints
	}
	for _, vs := range pb.external {
		vs.InClusterMark = mark
		key := model.FWMarkKey(mark, vs.Key.Addr.Is6())
		if _, done := pb.st.VSes[key]; !done {
			reals := pb.realsFor(key.Addr.Is6(), false)
			pb.st.VSes[key] = &model.VirtualServer{Key: key, Spec: checkedSpec(pb.spec, reals), Kind: model.KindInCluster,
				Reals: reals, PortName: sp.Name}
		}
	}
}

// reportDuplicates reports a port whose number or node port an earlier port of the Service
// already has with the same protocol (the API refuses both; objects from manifests are not
// validated): the earlier port keeps the virtual servers, the later one's are skipped. An
// address listed by two sources (a ClusterIP also in externalIPs) is not reported: its
// first source wins by design.
func (pb *portBuilder) reportDuplicates(i int, sp *v1.ServicePort, proto model.Protocol) {
	ports := pb.svcPorts
	for j := range i {
		other := &ports[j]
		if p, ok := Protocol(other.Protocol); !ok || p != proto {
			continue
		}
		if other.Port == sp.Port {
			pb.probs.add(ReasonDuplicatePort, "spec.ports[%d] (name %q) repeats port %d/%s of spec.ports[%d] (name %q); only the first one is served",
				i, sp.Name, sp.Port, proto, j, other.Name)
		}
		if sp.NodePort != 0 && other.NodePort == sp.NodePort {
			pb.probs.add(ReasonDuplicatePort, "spec.ports[%d] (name %q) repeats nodePort %d/%s of spec.ports[%d] (name %q); only the first one is served",
				i, sp.Name, sp.NodePort, proto, j, other.Name)
		}
	}
}

// add creates a virtual server of the given kind on each address at port, with the
// endpoints of the address's family under the given policy. Addresses other than node IPs
// are bound to kube-ipvs0, unless they are the node's own: those are already on an
// interface, and binding (and later unbinding) them would cut the node off.
func (pb *portBuilder) add(addrs []netip.Addr, port uint16, kind model.VSKind, local bool) {
	for _, a := range addrs {
		key := model.VSKey{Addr: a, Proto: pb.proto, Port: port}
		if _, dup := pb.st.VSes[key]; dup {
			continue // reported by reportDuplicates if two ports collide
		}
		reals := pb.realsFor(a.Is6(), local)
		if local && len(reals) == 0 && anyUsable(pb.eps[b2i(a.Is6())]) {
			gap := &pb.st.NoLocal[b2i(a.Is6())]
			if kind == model.KindClusterIP {
				gap.Internal = true
			} else {
				gap.External = true
			}
		}
		vs := &model.VirtualServer{Key: key, Spec: checkedSpec(pb.spec, reals), Kind: kind, Reals: reals, PortName: pb.sp.Name}
		vs.NoLocalEndpoints = local && len(reals) == 0 && len(pb.realsFor(a.Is6(), false)) > 0
		pb.st.VSes[key] = vs
		if local && kind != model.KindClusterIP {
			pb.external = append(pb.external, vs)
		}
		if kind != model.KindNodePort && !pb.vips.nodeOwn[a] && !pb.st.Binds(a) {
			pb.st.Bind = append(pb.st.Bind, a)
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
		pb.reals[f][p] = pb.applyVerdicts(selectReals(pb.eps[f], local, pb.cfg), is6)
		pb.choices.ports = append(pb.choices.ports, choicePort{name: pb.sp.Name, protocol: pb.sp.Protocol, is6: is6, local: local})
		pb.realDone[f][p] = true
	}
	return pb.reals[f][p]
}

// anyUsable reports whether any endpoint could serve, anywhere in the cluster: ready, or
// serving while terminating (what kube-proxy calls having any endpoints).
func anyUsable(eps []endpoint) bool {
	for i := range eps {
		if eps[i].ready || (eps[i].serving && eps[i].terminating) {
			return true
		}
	}
	return false
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

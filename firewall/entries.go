package firewall

import (
	v1 "k8s.io/api/core/v1"

	"github.com/kube-ipvs/kube-ipvs/model"
	"github.com/kube-ipvs/kube-ipvs/proxy"
)

// ServiceEntries returns the set entries of one Service: for each set name, the entries it
// must hold for this Service. st is the Service's desired IPVS state (proxy.BuildService);
// it decides which addresses and ports are served and which real servers exist. svc adds
// what st does not say: which virtual-server address is a ClusterIP, an external IP, a
// load-balancer IP or a node IP, the traffic policy, the source ranges and the health-check
// node port. A nil st (a Service the proxy leaves alone, or a deleted one) has no entries.
//
// Entries of families cfg does not enable are left out (their sets do not exist). Source
// ranges that do not parse are ignored; a range covering the whole family (0.0.0.0/0, ::/0)
// means no filtering for that family.
//
// Two Services may produce the same entry (a shared LB IP in SetVIPs, an endpoint behind two
// Services in SetLoopBack): Tracker counts owners so that one leaving does not remove the
// other's entry.
func ServiceEntries(svc *v1.Service, st *model.ServiceState, cfg Config) map[SetName]map[Entry]bool {
	out := map[SetName]map[Entry]bool{}
	serviceEntries(svc, st, cfg, func(n SetName, e Entry) {
		if out[n] == nil {
			out[n] = map[Entry]bool{}
		}
		out[n][e] = true
	})
	return out
}

// AppendMembers appends the Service's entries (as ServiceEntries gives them) to dst as
// packed members, in no order and possibly repeated: what Tracker.UpdateMembers takes.
func AppendMembers(dst []Member, svc *v1.Service, st *model.ServiceState, cfg Config) []Member {
	serviceEntries(svc, st, cfg, func(n SetName, e Entry) {
		dst = append(dst, Member{Set: IDOf(n), Entry: e.Pack()})
	})
	return dst
}

func serviceEntries(svc *v1.Service, st *model.ServiceState, cfg Config, put func(SetName, Entry)) {
	if svc == nil || st == nil {
		return
	}
	enabled := map[Family]bool{}
	for _, f := range cfg.families() {
		enabled[f] = true
	}
	add := func(base string, f Family, e Entry) { put(Name(base, f), e) }

	cluster := proxy.AddrSet(svc.Spec.ClusterIPs)
	if len(svc.Spec.ClusterIPs) == 0 {
		cluster = proxy.AddrSet([]string{svc.Spec.ClusterIP})
	}
	external := proxy.AddrSet(svc.Spec.ExternalIPs)
	var ingress []string
	if svc.Spec.Type == v1.ServiceTypeLoadBalancer {
		for _, ing := range svc.Status.LoadBalancer.Ingress {
			ingress = append(ingress, ing.IP)
		}
	}
	lb := proxy.AddrSet(ingress)

	type pp struct {
		proto model.Protocol
		port  uint16
	}
	svcPorts, nodePorts := map[pp]bool{}, map[pp]bool{}
	for _, p := range svc.Spec.Ports {
		proto, ok := proxy.Protocol(p.Protocol)
		if !ok {
			continue
		}
		if p.Port > 0 && p.Port <= 65535 {
			svcPorts[pp{proto, uint16(p.Port)}] = true
		}
		if p.NodePort > 0 && p.NodePort <= 65535 {
			nodePorts[pp{proto, uint16(p.NodePort)}] = true
		}
	}

	local := svc.Spec.ExternalTrafficPolicy == v1.ServiceExternalTrafficPolicyLocal
	ranges := proxy.SourceRangesOf(svc)

	for key, vs := range st.VSes {
		a := key.Addr.Unmap()
		f := FamilyOf(a)
		if !enabled[f] || !a.IsValid() || key.Port == 0 {
			continue
		}
		e := Entry{IP: a, Proto: key.Proto, Port: key.Port}
		served := svcPorts[pp{key.Proto, key.Port}]
		isNodePort := nodePorts[pp{key.Proto, key.Port}] && !cluster[a] && !external[a] && !lb[a]
		if !served && !isNodePort {
			continue // not a virtual server this Service explains
		}

		// Every real server may be the client of its own Service (hairpin).
		for rs := range vs.Reals {
			ra := rs.Addr.Unmap()
			if ra.IsValid() && FamilyOf(ra) == f && rs.Port != 0 {
				add(SetLoopBack, f, Entry{IP: ra, Proto: key.Proto, Port: rs.Port, IP2: ra})
			}
		}

		if served && cluster[a] {
			add(SetClusterIP, f, e)
		}
		if served && external[a] {
			add(pick(local, SetExternalIPLocal, SetExternalIP), f, e)
		}
		if served && lb[a] {
			add(pick(local, SetLoadBalancerLocal, SetLoadBalancer), f, e)
			if fam, filter := ranges.Of(f == IPv6); filter {
				add(SetLoadBalancerFW, f, e)
				for _, p := range fam {
					add(SetLBSourceCIDR, f, Entry{IP: a, Proto: key.Proto, Port: key.Port, Net: p})
				}
				for rs := range vs.Reals {
					if ra := rs.Addr.Unmap(); ra.IsValid() && FamilyOf(ra) == f {
						add(SetLBSourceIP, f, Entry{IP: a, Proto: key.Proto, Port: key.Port, IP2: ra})
					}
				}
				// The node reaches a VIP it holds with the VIP as source address: let it
				// through when a range admits one of the node's own addresses.
				if proxy.ContainsAny(fam, cfg.NodeIPs) {
					add(SetLBSourceIP, f, Entry{IP: a, Proto: key.Proto, Port: key.Port, IP2: a})
				}
			}
		}
		if isNodePort {
			add(pick(local, SetNodePortLocal, SetNodePort), f, e)
		}
	}

	for a := range st.Bind {
		a = a.Unmap()
		if a.IsValid() && enabled[FamilyOf(a)] {
			add(SetVIPs, FamilyOf(a), Entry{IP: a})
		}
	}

	if local && svc.Spec.Type == v1.ServiceTypeLoadBalancer && svc.Spec.HealthCheckNodePort > 0 &&
		svc.Spec.HealthCheckNodePort <= 65535 && len(cfg.families()) > 0 {
		add(SetHealthCheckNodePort, AnyFamily, Entry{Port: uint16(svc.Spec.HealthCheckNodePort)})
	}
}

func pick(local bool, ifLocal, otherwise string) string {
	if local {
		return ifLocal
	}
	return otherwise
}

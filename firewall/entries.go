package firewall

import (
	"net/netip"

	"github.com/kube-ipvs/kube-ipvs/model"
)

// AppendMembers appends the set entries of one Service to dst as packed members (set and
// entry), in no order and possibly repeated: what Tracker.UpdateMembers takes. st is the
// Service's resolved desired state: from proxy.BuildService, without the virtual servers
// another Service won (the IPVS dataplane strips those before the firewall sees the state,
// so a losing Service cannot widen the winner's filters). Each virtual server's kind and the
// Service's policy come with it; a nil st (a Service the proxy leaves alone, or a deleted
// one) has no entries.
//
// Entries of families cfg does not enable are left out (their sets do not exist). A source
// range covering the whole family (0.0.0.0/0, ::/0) means no filtering for that family.
//
// Two Services may produce the same entry (a shared LB IP in SetVIPs, an endpoint behind two
// Services in SetLoopBack): Tracker counts owners so that one leaving does not remove the
// other's entry.
func AppendMembers(dst []Member, st *model.ServiceState, cfg Config) []Member {
	serviceEntries(st, cfg, func(n SetName, e Entry) {
		dst = append(dst, Member{Set: IDOf(n), Entry: e.Pack()})
	})
	return dst
}

func serviceEntries(st *model.ServiceState, cfg Config, put func(SetName, Entry)) {
	if st == nil {
		return
	}
	var enabled [2]bool
	for _, f := range cfg.Families() {
		enabled[b2i(f == IPv6)] = true
	}
	add := func(base string, f Family, e Entry) { put(Name(base, f), e) }
	for key, vs := range st.VSes {
		a := key.Addr.Unmap()
		// A firewall-mark virtual server (port 0) has no entries of its own: its traffic is
		// marked by the entries of the external virtual servers that name its mark.
		if !a.IsValid() || key.Port == 0 || !enabled[b2i(a.Is6())] {
			continue
		}
		vsEntries(st, vs, a, cfg, add)
	}
	for _, a := range st.Bind {
		a = a.Unmap()
		if a.IsValid() && enabled[b2i(a.Is6())] {
			add(SetVIPs, FamilyOf(a), Entry{IP: a})
		}
	}
	if st.ExternalLocal && st.LoadBalancer && st.HealthCheckNodePort != 0 && len(cfg.Families()) > 0 {
		add(SetHealthCheckNodePort, AnyFamily, Entry{Port: st.HealthCheckNodePort})
	}
}

// vsEntries adds the entries of one virtual server at address a (unmapped).
func vsEntries(st *model.ServiceState, vs *model.VirtualServer, a netip.Addr, cfg Config, add func(string, Family, Entry)) {
	key := vs.Key
	f := FamilyOf(a)
	e := Entry{IP: a, Proto: key.Proto, Port: key.Port}
	// Every real server may be the client of its own Service (hairpin).
	for rs := range vs.Reals {
		ra := rs.Addr.Unmap()
		if ra.IsValid() && FamilyOf(ra) == f && rs.Port != 0 {
			add(SetLoopBack, f, Entry{IP: ra, Proto: key.Proto, Port: rs.Port, IP2: ra})
		}
	}
	// The mark only where this Service holds its firewall-mark virtual server: one that lost
	// it to another Service (the same node port, from unvalidated manifests) would send
	// in-cluster traffic to the winner's endpoints.
	if _, won := st.VSes[model.FWMarkKey(vs.InClusterMark, f == IPv6)]; vs.InClusterMark != 0 && won {
		add(SetInClusterLocal, f, Entry{IP: a, Proto: key.Proto, Port: key.Port, Mark: vs.InClusterMark})
	}
	local := st.ExternalLocal
	switch vs.Kind {
	case model.KindClusterIP:
		add(SetClusterIP, f, e)
	case model.KindExternalIP:
		add(pick(local, SetExternalIPLocal, SetExternalIP), f, e)
	case model.KindNodePort:
		add(pick(local, SetNodePortLocal, SetNodePort), f, e)
	case model.KindLoadBalancer:
		add(pick(local, SetLoadBalancerLocal, SetLoadBalancer), f, e)
		fam, filter := st.SourceRanges.Of(f == IPv6)
		if !filter {
			return
		}
		add(SetLoadBalancerFW, f, e)
		for _, p := range fam {
			add(SetLBSourceCIDR, f, Entry{IP: a, Proto: key.Proto, Port: key.Port, Net: p})
		}
		for rs := range vs.Reals {
			if ra := rs.Addr.Unmap(); ra.IsValid() && FamilyOf(ra) == f {
				add(SetLBSourceIP, f, Entry{IP: a, Proto: key.Proto, Port: key.Port, IP2: ra})
			}
		}
		// The node reaches a VIP it holds with the VIP as source address: let it through
		// when a range admits one of the node's own addresses.
		if model.ContainsAny(fam, cfg.NodeIPs) {
			add(SetLBSourceIP, f, Entry{IP: a, Proto: key.Proto, Port: key.Port, IP2: a})
		}
	}
}

func pick(local bool, ifLocal, otherwise string) string {
	if local {
		return ifLocal
	}
	return otherwise
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

package introspect

import (
	"net/netip"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/kube-ipvs/kube-ipvs/backendcheck"
	"github.com/kube-ipvs/kube-ipvs/firewall"
	"github.com/kube-ipvs/kube-ipvs/model"
	"github.com/kube-ipvs/kube-ipvs/proxy"
)

// Input is what Build turns into a Document: the controller's resolved desired state and
// what the dataplane knows besides it.
type Input struct {
	Node, Mode string
	Ownership  Ownership
	Services   []*model.ServiceState
	// Draining are the real servers draining at weight 0, with their deadlines.
	Draining map[model.VSKey]map[model.RSKey]time.Time
	// Firewall is the IPVS mode's set and rule configuration (nil: no sets, as in the
	// iptables mode). Without NodeIPs, the addresses of the NodePort virtual servers
	// stand in for them (the node IPs a repair gives the mode).
	Firewall *firewall.Config
	// Checks returns the backend checker's state of a Service's endpoints (nil: no checker).
	Checks func(model.ServiceName) []backendcheck.EndpointState
	Now    time.Time
}

// Build renders the desired state as a Document, Services sorted by name and everything
// inside them sorted, so that the same state always gives the same bytes.
func Build(in Input) Document {
	doc := Document{Version: Version, Node: in.Node, Mode: in.Mode, Ownership: in.Ownership, Generated: in.Now.UTC(), Services: []Service{}}
	var rules []string
	if in.Firewall != nil {
		fw := *in.Firewall
		if len(fw.NodeIPs) == 0 {
			fw.NodeIPs = nodePortAddrs(in.Services)
		}
		in.Firewall = &fw
		v4, v6 := firewall.RenderRules(fw)
		rules = strings.Split(strings.TrimSpace(v4+v6), "\n")
	}
	for _, st := range in.Services {
		if st != nil {
			doc.Services = append(doc.Services, buildService(st, in, rules))
		}
	}
	sort.Slice(doc.Services, func(i, j int) bool {
		a, b := doc.Services[i], doc.Services[j]
		return a.Namespace+"/"+a.Name < b.Namespace+"/"+b.Name
	})
	return doc
}

func buildService(st *model.ServiceState, in Input, rules []string) Service {
	s := Service{Namespace: st.Name.Namespace, Name: st.Name.Name, ExternalLocal: st.ExternalLocal,
		VIPs: []VIP{}, VirtualServers: []VirtualServer{}, Endpoints: []Endpoint{}}
	choices := st.EndpointChoices()
	pods := podsOf(choices)
	keys := make([]model.VSKey, 0, len(st.VSes))
	for k := range st.VSes {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return model.VSKeyLess(keys[i], keys[j]) })
	seen := map[netip.Addr]bool{}
	for _, k := range keys {
		vs := st.VSes[k]
		s.Scheduler, s.Flags, s.Persistence = specParts(vs.Spec)
		s.VirtualServers = append(s.VirtualServers, buildVS(vs, pods, in.Draining[k], in.Now))
		if !seen[k.Addr] {
			seen[k.Addr] = true
			s.VIPs = append(s.VIPs, VIP{Address: k.Addr.String(), Kind: vs.Kind.String(), Binding: binding(st, vs)})
		}
	}
	for _, c := range choices {
		policy := "Cluster"
		if c.Local {
			policy = "Local"
		}
		s.Endpoints = append(s.Endpoints, Endpoint{PortName: c.PortName, Policy: policy, Address: c.RS.String(),
			Pod: c.Pod, Node: c.Node, Chosen: c.Chosen, Why: c.Why})
	}
	for _, p := range st.Reasons {
		s.Problems = append(s.Problems, Problem{Reason: p.Reason, Message: p.Message})
	}
	if in.Firewall != nil {
		s.SetEntries, s.Rules = setsAndRules(st, *in.Firewall, rules)
	}
	s.HealthCheck = healthCheckOf(st, in.Checks)
	return s
}

// specParts splits a spec into the scheduler, its named flags and the persistence timeout.
func specParts(spec model.VSSpec) (string, []string, uint32) {
	var persist uint32
	if spec.Flags&model.FlagPersistent != 0 {
		persist = spec.Timeout
	}
	return spec.Scheduler, proxy.FlagNames(spec.Scheduler, spec.Flags), persist
}

// binding says how the node holds a virtual server's address.
func binding(st *model.ServiceState, vs *model.VirtualServer) string {
	switch {
	case vs.Kind == model.KindNodePort:
		return BoundNodeIP
	case st.Binds(vs.Key.Addr):
		return BoundDummy
	}
	return BoundNodeAddr
}

// podsOf maps each endpoint address to its pod and node, from the endpoint choices.
func podsOf(choices []model.EndpointChoice) map[model.RSKey]model.EndpointChoice {
	out := make(map[model.RSKey]model.EndpointChoice, len(choices))
	for _, c := range choices {
		out[c.RS] = c
	}
	return out
}

func buildVS(vs *model.VirtualServer, pods map[model.RSKey]model.EndpointChoice, draining map[model.RSKey]time.Time, now time.Time) VirtualServer {
	sched, flags, persist := specParts(vs.Spec)
	proto := vs.Key.Proto.String()
	if vs.Key.FWMark != 0 {
		proto = ""
	}
	out := VirtualServer{Protocol: proto, Address: netip.AddrPortFrom(vs.Key.Addr, vs.Key.Port).String(),
		FWMark: vs.Key.FWMark, Kind: vs.Kind.String(), PortName: vs.PortName, Scheduler: sched, Flags: flags, Persistence: persist, Reals: []Real{}}
	for rs, w := range vs.Reals {
		out.Reals = append(out.Reals, Real{Address: rs.String(), Weight: w, Pod: pods[rs].Pod, Node: pods[rs].Node})
	}
	for rs, deadline := range draining {
		if _, wanted := vs.Reals[rs]; wanted {
			continue
		}
		left := max(deadline.Sub(now), 0)
		out.Reals = append(out.Reals, Real{Address: rs.String(), Pod: pods[rs].Pod, Node: pods[rs].Node,
			Draining: true, DrainSecondsLeft: left.Round(time.Second).Seconds()})
	}
	sort.Slice(out.Reals, func(i, j int) bool { return rsLess(out.Reals[i].Address, out.Reals[j].Address) })
	return out
}

func rsLess(a, b string) bool {
	pa, ea := netip.ParseAddrPort(a)
	pb, eb := netip.ParseAddrPort(b)
	if ea != nil || eb != nil {
		return a < b
	}
	return model.RSKeyLess(model.RSKey{Addr: pa.Addr(), Port: pa.Port()}, model.RSKey{Addr: pb.Addr(), Port: pb.Port()})
}

// setsAndRules lists the Service's ipset entries and the fixed rules that match the sets
// they are in.
func setsAndRules(st *model.ServiceState, cfg firewall.Config, rules []string) (entries, matching []string) {
	members := firewall.SortMembers(firewall.AppendMembers(nil, st, cfg))
	sets := map[firewall.SetName]bool{}
	for _, m := range members {
		name := m.Set.Name()
		sets[name] = true
		entries = append(entries, string(name)+" "+m.Entry.Entry().String())
	}
	for _, r := range rules {
		for name := range sets {
			if strings.Contains(r, "--match-set "+string(name)+" ") {
				matching = append(matching, r)
				break
			}
		}
	}
	return slices.Compact(entries), matching
}

// nodePortAddrs are the distinct addresses of the NodePort virtual servers, sorted.
func nodePortAddrs(states []*model.ServiceState) []netip.Addr {
	seen := map[netip.Addr]bool{}
	var out []netip.Addr
	for _, st := range states {
		if st == nil {
			continue
		}
		for k, vs := range st.VSes {
			if vs.Kind == model.KindNodePort && !seen[k.Addr] {
				seen[k.Addr] = true
				out = append(out, k.Addr)
			}
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

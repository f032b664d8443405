package iptproxy

import (
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"

	"github.com/kube-ipvs/kube-ipvs/model"
)

// portRenderer renders the chains and dispatch rules of one Service port in one family.
type portRenderer struct {
	r     *svcRules
	f     family
	rc    *renderConfig
	pk    portKey
	local bool
	id    string // what the chain names hash
	label string // namespace/name:port, for comments
	vses  []*model.VirtualServer

	// What plan derives from vses for the steps of render.
	clusterVS                             *model.VirtualServer   // the ClusterIP's, nil without one
	extVSes                               []*model.VirtualServer // externalIPs', load-balancer IPs' and NodePorts'
	internal                              []model.RSKey          // the ClusterIP's endpoints
	external                              []model.RSKey          // the external addresses' endpoints
	persistent                            bool                   // ClientIP affinity
	timeout                               uint32                 // its timeout
	svcChain, svxChain, extChain, fwChain string
	// extBalancer is the chain that balances external traffic ("" when it has no endpoints);
	// needExt says whether external traffic goes through extChain.
	extBalancer string
	needExt     bool
}

func (pr *portRenderer) chain(table, name string, rules ...string) {
	pr.r.chains = append(pr.r.chains, chainRules{chainKey{table, name}, rules})
}

func (pr *portRenderer) dispatch(table, chain string, parts ...string) {
	pr.r.dispatch = append(pr.r.dispatch, dispatchRule{table, chain, join(parts...)})
}

func sortedReals(vs *model.VirtualServer) []model.RSKey {
	out := make([]model.RSKey, 0, len(vs.Reals))
	for k := range vs.Reals {
		if k.Addr.IsValid() && k.Port != 0 {
			out = append(out, model.RSKey{Addr: k.Addr.Unmap(), Port: k.Port})
		}
	}
	sort.Slice(out, func(i, j int) bool { return model.RSKeyLess(out[i], out[j]) })
	return slices.Compact(out)
}

// render writes the port's chains (nat, then filter) and its rules in the shared chains.
func (pr *portRenderer) render(ranges model.SourceRanges) {
	if !pr.plan() {
		return
	}
	pr.natChains()
	fw := pr.firewallChain(ranges)
	pr.dispatchRules(fw)
}

// plan sorts the port's virtual servers by kind and derives its endpoint lists and chain
// names; false when there is nothing to render.
func (pr *portRenderer) plan() bool {
	for i := range pr.vses {
		if pr.vses[i].Kind == model.KindClusterIP {
			if pr.clusterVS == nil {
				pr.clusterVS = pr.vses[i]
			}
		} else {
			pr.extVSes = append(pr.extVSes, pr.vses[i])
		}
	}
	if pr.clusterVS == nil && len(pr.extVSes) == 0 {
		return false
	}
	spec := pr.vses[0].Spec
	pr.persistent = spec.Flags&model.FlagPersistent != 0
	pr.timeout = spec.Timeout

	// The endpoint lists: the ClusterIP's (internalTrafficPolicy already applied) and the
	// external addresses' (externalTrafficPolicy already applied; the same for all of
	// them, BuildService computes them once per family and policy).
	if pr.clusterVS != nil {
		pr.internal = sortedReals(pr.clusterVS)
	}
	if len(pr.extVSes) > 0 {
		pr.external = sortedReals(pr.extVSes[0])
	}

	pr.svcChain = chainName(prefixSVC, pr.id)
	pr.svxChain = chainName(prefixSVX, pr.id)
	pr.extChain = chainName(prefixEXT, pr.id)
	pr.fwChain = chainName(prefixFW, pr.id)

	// Which chain balances external traffic: the ClusterIP's when the lists agree.
	switch {
	case len(pr.external) == 0:
	case slices.Equal(pr.external, pr.internal):
		pr.extBalancer = pr.svcChain
	default:
		pr.extBalancer = pr.svxChain
	}
	// External traffic needs KIPVS-EXT- when it has endpoints, or, with
	// externalTrafficPolicy=Local, when pods and the node may still use the ClusterIP's.
	pr.needExt = len(pr.extVSes) > 0 && (pr.extBalancer != "" || (pr.local && len(pr.internal) > 0))
	return true
}

// sepChain names the KIPVS-SEP- chain of one endpoint of the port.
func (pr *portRenderer) sepChain(ep model.RSKey) string {
	return chainName(prefixSEP, pr.id+" "+ep.String())
}

// natChains writes the nat chains: the balancing chains, the external chain, the endpoint
// chains.
func (pr *portRenderer) natChains() {
	internal, sep := pr.internal, pr.sepChain
	if len(internal) > 0 {
		var rules []string
		if m := pr.clusterMasq(pr.clusterVS.Key); m != "" {
			rules = append(rules, m)
		}
		rules = append(rules, pr.balance(internal, sep, pr.persistent, pr.timeout)...)
		pr.chain(tableNAT, pr.svcChain, rules...)
	}
	if pr.extBalancer == pr.svxChain {
		pr.chain(tableNAT, pr.svxChain, pr.balance(pr.external, sep, pr.persistent, pr.timeout)...)
	}
	if pr.needExt {
		pr.chain(tableNAT, pr.extChain, pr.externalRules()...)
	}
	for _, ep := range union(internal, pr.external) {
		pr.chain(tableNAT, sep(ep), pr.endpoint(ep, sep(ep), pr.persistent)...)
		pr.r.endpoints++
	}
}

// externalRules are the KIPVS-EXT- chain's rules: with externalTrafficPolicy=Cluster
// external traffic is masqueraded; with Local the client address is kept, while pods and
// the node itself use the ClusterIP's endpoints (the node masqueraded).
func (pr *portRenderer) externalRules() []string {
	var rules []string
	if !pr.local {
		rules = append(rules, join(comment(pr.label+" external traffic with policy Cluster: masquerade"), "-j "+ChainMarkMasq))
	} else if len(pr.internal) > 0 {
		for _, m := range pr.rc.local[pr.f] {
			rules = append(rules, join(m, comment(pr.label+" pods reach external addresses through the ClusterIP endpoints"), "-j "+pr.svcChain))
		}
		rules = append(rules,
			join("-m addrtype --src-type LOCAL", comment(pr.label+" node-originated: masquerade"), "-j "+ChainMarkMasq),
			join("-m addrtype --src-type LOCAL", comment(pr.label+" node-originated: any endpoint"), "-j "+pr.svcChain))
	}
	if pr.extBalancer != "" {
		rules = append(rules, "-j "+pr.extBalancer)
	}
	return rules
}

// firewallChain writes the filter chain of the source ranges of load-balancer IPs, when
// the port has load-balancer IPs and the Service source ranges in this family; it reports
// whether it wrote one.
func (pr *portRenderer) firewallChain(ranges model.SourceRanges) bool {
	pre, filtered := ranges.Of(pr.f == v6)
	if !filtered {
		return false
	}
	var lbIPs []netip.Addr
	for _, kv := range pr.extVSes {
		if kv.Kind == model.KindLoadBalancer {
			lbIPs = append(lbIPs, kv.Key.Addr.Unmap())
		}
	}
	if len(lbIPs) == 0 {
		return false
	}
	var rules []string
	for _, p := range pre {
		rules = append(rules, join("-s "+p.String(), comment(pr.label+" loadBalancerSourceRanges"), "-j RETURN"))
	}
	// When a range admits one of the node's own addresses, the node may also reach
	// the load balancer with the load-balancer IP as its source.
	if model.ContainsAny(pre, pr.rc.nodeIPs) {
		for _, a := range lbIPs {
			rules = append(rules, join("-s "+hostPrefix(a), comment(pr.label+" the node itself, from the load-balancer IP"), "-j RETURN"))
		}
	}
	rules = append(rules, join(comment(pr.label+" source outside loadBalancerSourceRanges"), "-j DROP"))
	pr.chain(tableFilter, pr.fwChain, rules...)
	return true
}

// dispatchRules writes the port's rules in the shared chains; fw says whether its
// load-balancer IPs have a source-range chain.
func (pr *portRenderer) dispatchRules(fw bool) {
	internal := pr.internal
	proto := protoName(pr.pk.proto)
	if pr.clusterVS != nil {
		k := pr.clusterVS.Key
		switch {
		case len(internal) > 0:
			pr.dispatch(tableNAT, ChainServices, "-d "+hostPrefix(k.Addr.Unmap()), portMatch(k.Proto, k.Port), comment(pr.label+" cluster IP"), "-j "+pr.svcChain)
		case pr.clusterVS.NoLocalEndpoints:
			// internalTrafficPolicy Local with endpoints on other nodes only: dropped, as
			// kube-proxy's iptables mode does, not refused as a port without endpoints.
			pr.dispatch(tableFilter, ChainServices, "-d "+hostPrefix(k.Addr.Unmap()), portMatch(k.Proto, k.Port), comment(pr.label+" has no local endpoints"), "-j DROP")
		default:
			pr.dispatch(tableFilter, ChainServices, "-d "+hostPrefix(k.Addr.Unmap()), portMatch(k.Proto, k.Port), comment(pr.label+" has no endpoints"),
				"-j REJECT --reject-with "+rejectWith(pr.f, k.Proto))
		}
	}
	for _, kv := range pr.extVSes {
		k := kv.Key
		dst := "-d " + hostPrefix(k.Addr.Unmap())
		if pr.needExt {
			ch := ChainServices
			if kv.Kind == model.KindNodePort {
				ch = ChainNodePorts
			}
			pr.dispatch(tableNAT, ch, dst, portMatch(k.Proto, k.Port), comment(pr.label+" "+kindLabel(kv.Kind)), "-j "+pr.extChain)
		}
		switch {
		case pr.extBalancer != "":
		case pr.local && (len(internal) > 0 || kv.NoLocalEndpoints):
			pr.dispatch(tableFilter, ChainServices, dst, portMatch(k.Proto, k.Port), comment(pr.label+" "+kindLabel(kv.Kind)+" has no local endpoints"), "-j DROP")
		default:
			pr.dispatch(tableFilter, ChainServices, dst, portMatch(k.Proto, k.Port), comment(pr.label+" "+kindLabel(kv.Kind)+" has no endpoints"),
				"-j REJECT --reject-with "+rejectWith(pr.f, k.Proto))
		}
		if fw && kv.Kind == model.KindLoadBalancer {
			pr.dispatch(tableFilter, ChainFirewall, "-p "+proto,
				fmt.Sprintf("-m conntrack --ctorigdst %s --ctorigdstport %d", k.Addr.Unmap(), k.Port),
				comment(pr.label+" load-balancer IP with source ranges"), "-j "+pr.fwChain)
		}
	}
}

// clusterMasq is the SVC chain's first rule: which connections to the ClusterIP to
// masquerade ("" for none).
func (pr *portRenderer) clusterMasq(k model.VSKey) string {
	dst := "-d " + hostPrefix(k.Addr.Unmap())
	local := pr.rc.local[pr.f]
	switch {
	case pr.rc.masqueradeAll:
		return join(dst, portMatch(k.Proto, k.Port), comment(pr.label+" cluster IP: masquerade all"), "-j "+ChainMarkMasq)
	case len(local) == 1:
		// In the order iptables-save prints them (-s, -d, -i), which the repair compares.
		src, iface := "! "+local[0], ""
		if strings.HasPrefix(local[0], "-i ") {
			src, iface = "", src
		}
		return join(src, dst, iface, portMatch(k.Proto, k.Port), comment(pr.label+" cluster IP from outside the "+pr.rc.localName+": masquerade"), "-j "+ChainMarkMasq)
	case len(local) > 1:
		return join(dst, portMatch(k.Proto, k.Port), comment(pr.label+" cluster IP: masquerade unless from a cluster CIDR"), "-j "+ChainClusterMasq)
	}
	return ""
}

// balance picks one endpoint per new connection: with affinity, the endpoint the client
// used within the timeout; otherwise endpoint i with probability 1/(n-i) among those not
// yet passed, which is 1/n for each; the last one takes the rest.
func (pr *portRenderer) balance(eps []model.RSKey, sep func(model.RSKey) string, persistent bool, timeout uint32) []string {
	var rules []string
	if persistent {
		for _, ep := range eps {
			rules = append(rules, join(comment(pr.label+" -> "+ep.String()+" affinity"),
				fmt.Sprintf("-m recent --rcheck --seconds %d --reap --name %s --mask %s --rsource", timeout, sep(ep), fullMask(pr.f)),
				"-j "+sep(ep)))
		}
	}
	n := len(eps)
	for i, ep := range eps {
		stat := ""
		if i < n-1 {
			stat = "-m statistic --mode random --probability " + probability(n-i)
		}
		rules = append(rules, join(comment(pr.label+" -> "+ep.String()), stat, "-j "+sep(ep)))
	}
	return rules
}

// endpoint is a KIPVS-SEP- chain: hairpin traffic (the endpoint reaching itself through its
// Service) is masqueraded so the reply comes back through the node; affinity remembers the
// client; DNAT sends the connection to the endpoint.
func (pr *portRenderer) endpoint(ep model.RSKey, name string, persistent bool) []string {
	proto := protoName(pr.pk.proto)
	rules := []string{join("-s "+hostPrefix(ep.Addr), comment(pr.label+" hairpin"), "-j "+ChainMarkMasq)}
	rec := ""
	if persistent {
		rec = fmt.Sprintf("-m recent --set --name %s --mask %s --rsource", name, fullMask(pr.f))
	}
	rules = append(rules, join("-p "+proto, comment(pr.label), rec, "-j DNAT --to-destination "+netip.AddrPortFrom(ep.Addr, ep.Port).String()))
	return rules
}

func union(a, b []model.RSKey) []model.RSKey {
	out := append(slices.Clone(a), b...)
	sort.Slice(out, func(i, j int) bool { return model.RSKeyLess(out[i], out[j]) })
	return slices.Compact(out)
}

package iptproxy

import (
	"crypto/sha256"
	"encoding/base32"
	"fmt"
	"math"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/kube-ipvs/kube-ipvs/model"
)

// Tables the proxy writes.
const (
	tableNAT    = "nat"
	tableFilter = "filter"
)

// Chains kube-ipvs owns in iptables mode. Every name starts with KIPVS- (never KUBE-), so
// kube-proxy's chains and ours never meet.
const (
	// nat KIPVS-SERVICES (from PREROUTING and OUTPUT) holds one dispatch rule per
	// ClusterIP, externalIP and load-balancer IP and port, then a jump to KIPVS-NODEPORTS
	// for the node's own addresses. filter KIPVS-SERVICES (from KIPVS-INPUT,
	// KIPVS-FORWARD and KIPVS-OUTPUT, new connections only) rejects connections to
	// Service ports without endpoints and drops the traffic of a Local traffic policy
	// (external or internal) whose port has endpoints on other nodes only.
	ChainServices = "KIPVS-SERVICES"
	// nat KIPVS-NODEPORTS holds one dispatch rule per node IP and nodePort; filter
	// KIPVS-NODEPORTS accepts health-check node ports.
	ChainNodePorts = "KIPVS-NODEPORTS"
	// nat KIPVS-MARK-MASQ sets the masquerade mark; KIPVS-POSTROUTING (from POSTROUTING)
	// masquerades marked packets; KIPVS-CLUSTER-MASQ decides by source when a family
	// has more than one cluster CIDR.
	ChainMarkMasq    = "KIPVS-MARK-MASQ"
	ChainPostrouting = "KIPVS-POSTROUTING"
	ChainClusterMasq = "KIPVS-CLUSTER-MASQ"
	// filter KIPVS-FIREWALL holds one rule per load-balancer IP and port with source
	// ranges, matched by the connection's original destination (so before and after
	// DNAT alike); it jumps to the port's KIPVS-FW- chain.
	ChainFirewall = "KIPVS-FIREWALL"
	// filter entry chains, one per built-in chain we hook.
	ChainInput   = "KIPVS-INPUT"
	ChainForward = "KIPVS-FORWARD"
	ChainOutput  = "KIPVS-OUTPUT"
	// filter KIPVS-SERVICE-CIDRS (from KIPVS-FORWARD and KIPVS-OUTPUT, new connections
	// only) rejects what still goes to a Service CIDR after DNAT: an address no Service
	// holds, or a port no Service exposes there. One rule per CIDR, none per Service.
	ChainServiceCIDRs = "KIPVS-SERVICE-CIDRS"

	// Per Service port and per endpoint chains: the prefix, then 16 characters of the
	// base32 SHA-256 of "namespace/name:port/PROTOCOL" (and the endpoint).
	prefixSVC = "KIPVS-SVC-" // nat: balances over the ClusterIP's endpoints
	prefixSVX = "KIPVS-SVX-" // nat: balances over external endpoints when they differ
	prefixEXT = "KIPVS-EXT-" // nat: external traffic: masquerade or keep the client
	prefixSEP = "KIPVS-SEP-" // nat: one endpoint: hairpin masquerade, affinity, DNAT
	prefixFW  = "KIPVS-FW-"  // filter: load-balancer source ranges
)

// chainKey names a chain in a table.
type chainKey struct {
	table, name string
}

// chainRules is one chain with its rules (what follows "-A <chain> ").
type chainRules struct {
	chainKey
	rules []string
}

// dispatchRule is a rule of a Service in a shared chain (KIPVS-SERVICES, KIPVS-NODEPORTS,
// KIPVS-FIREWALL): added and deleted one by one, never by rewriting the chain.
type dispatchRule struct {
	table, chain, spec string
}

// svcRules is everything one Service puts into one family's tables.
type svcRules struct {
	chains    []chainRules   // the Service's own chains, written whole
	dispatch  []dispatchRule // its rules in the shared chains
	endpoints int            // KIPVS-SEP- chains
}

func (s *svcRules) empty() bool { return s == nil || (len(s.chains) == 0 && len(s.dispatch) == 0) }

// renderConfig is the Config as the renderer needs it, per family.
type renderConfig struct {
	mark          uint32
	masqueradeAll bool
	local         [2][]string // firewall.Config.LocalMatches, by family
	localName     string      // what local matches, for comments
	nodeIPs       []netip.Addr
	serviceCIDRs  [2][]netip.Prefix
}

func newRenderConfig(cfg Config, nodeIPs []netip.Addr, serviceCIDRs []netip.Prefix) *renderConfig {
	rc := &renderConfig{mark: cfg.mark(), masqueradeAll: cfg.MasqueradeAll, localName: "cluster CIDR"}
	if cfg.LocalInterface != "" {
		rc.localName = "pod interfaces"
	}
	for _, f := range []family{v4, v6} {
		rc.local[f] = cfg.localMatches(f)
		// A /0 would refuse every routed connection (the API refuses one anyway).
		rc.serviceCIDRs[f] = slices.DeleteFunc(prefixesOf(serviceCIDRs, f), func(p netip.Prefix) bool { return p.Bits() == 0 })
	}
	for _, a := range nodeIPs {
		if a.IsValid() {
			rc.nodeIPs = append(rc.nodeIPs, a.Unmap())
		}
	}
	return rc
}

func (rc *renderConfig) markMask() string { return fmt.Sprintf("%#x/%#x", rc.mark, rc.mark) }

// chainName hashes what a chain stands for into a name of at most 26 characters
// (iptables allows 28).
func chainName(prefix, what string) string {
	sum := sha256.Sum256([]byte(what))
	return prefix + base32.StdEncoding.EncodeToString(sum[:])[:16]
}

func comment(c string) string { return `-m comment --comment "` + c + `"` }

func join(parts ...string) string {
	out := make([]string, 0, len(parts))
	for _, p := range parts {
		if p != "" {
			out = append(out, p)
		}
	}
	return strings.Join(out, " ")
}

func protoName(p model.Protocol) string { return strings.ToLower(p.String()) }

// portMatch matches a protocol and destination port as iptables-save prints it.
func portMatch(p model.Protocol, port uint16) string {
	n := protoName(p)
	return fmt.Sprintf("-p %s -m %s --dport %d", n, n, port)
}

func hostPrefix(a netip.Addr) string { return netip.PrefixFrom(a, a.BitLen()).String() }

// probability renders 1/n as iptables-save prints it: the statistic match keeps
// round(p * 2^31) and prints that fraction with 11 decimals, so a rule reads back as
// written.
func probability(n int) string {
	v := math.Round(0x80000000 / float64(n))
	return strconv.FormatFloat(v/0x80000000, 'f', 11, 64)
}

func rejectWith(f family, p model.Protocol) string {
	switch {
	case p == model.TCP:
		return "tcp-reset"
	case f == v6:
		return "icmp6-port-unreachable"
	}
	return "icmp-port-unreachable"
}

func fullMask(f family) string {
	if f == v6 {
		return "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"
	}
	return "255.255.255.255"
}

// portKey identifies a Service port the way its virtual servers name it.
type portKey struct {
	proto model.Protocol
	name  string
}

// kindLabel is how rule comments name a virtual server's kind.
func kindLabel(k model.VSKind) string {
	return [...]string{"cluster IP", "external IP", "load-balancer IP", "NodePort"}[k]
}

// renderService returns the rules of one Service in one family, or nil when it has none
// there. st is the Service's resolved desired state (from proxy.BuildService, without the
// virtual servers another Service won): it says each virtual server's kind and endpoints
// (already filtered for traffic policies and topology), and the Service's traffic policy,
// source ranges and health-check node port.
func renderService(st *model.ServiceState, f family, rc *renderConfig) *svcRules {
	if st == nil {
		return nil
	}
	groups := map[portKey][]*model.VirtualServer{}
	hasCluster := false
	for key, vs := range st.VSes {
		if !key.Addr.IsValid() || familyOf(key.Addr) != f || key.Port == 0 {
			continue
		}
		pk := portKey{key.Proto, vs.PortName}
		groups[pk] = append(groups[pk], vs)
		hasCluster = hasCluster || vs.Kind == model.KindClusterIP
	}
	if len(groups) == 0 {
		return nil
	}
	keys := make([]portKey, 0, len(groups))
	for k := range groups {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].name != keys[j].name {
			return keys[i].name < keys[j].name
		}
		return keys[i].proto < keys[j].proto
	})

	r := &svcRules{}
	name := st.Name.String()
	for _, pk := range keys {
		vses := groups[pk]
		sort.Slice(vses, func(i, j int) bool { return model.VSKeyLess(vses[i].Key, vses[j].Key) })
		pr := portRenderer{
			r: r, f: f, rc: rc, pk: pk, local: st.ExternalLocal,
			id:    fmt.Sprintf("%s:%s/%s", name, pk.name, pk.proto),
			label: name,
		}
		if pk.name != "" {
			pr.label += ":" + pk.name
		}
		pr.vses = vses
		pr.render(st.SourceRanges)
	}

	// The health-check node port of an externalTrafficPolicy=Local load balancer is
	// accepted even under a DROP input policy.
	if st.ExternalLocal && st.LoadBalancer && st.HealthCheckNodePort != 0 && hasCluster {
		r.dispatch = append(r.dispatch, dispatchRule{tableFilter, ChainNodePorts,
			join(portMatch(model.TCP, st.HealthCheckNodePort), comment(name+" health-check node port"), "-j ACCEPT")})
	}
	if r.empty() {
		return nil
	}
	return r
}

// staticChains are the family's shared chains with their fixed rules, in write order;
// dispatch rules go into some of them (before the fixed ones). jumps are the rules that
// hook them into the built-in chains, each inserted first.
func staticChains(f family, rc *renderConfig) (chains []chainRules, jumps []dispatchRule) {
	mark := rc.markMask()
	nat := []chainRules{
		{chainKey{tableNAT, ChainServices}, []string{
			join("-m addrtype --dst-type LOCAL", comment("kube-ipvs: NodePorts on the node addresses"), "-j "+ChainNodePorts)}},
		{chainKey{tableNAT, ChainNodePorts}, nil},
		{chainKey{tableNAT, ChainMarkMasq}, []string{"-j MARK --set-xmark " + mark}},
		{chainKey{tableNAT, ChainPostrouting}, []string{
			"-m mark ! --mark " + mark + " -j RETURN",
			fmt.Sprintf("-j MARK --set-xmark 0x0/%#x", rc.mark),
			join(comment("kube-ipvs: masquerade Service traffic marked in "+ChainMarkMasq), "-j MASQUERADE")}},
	}
	if local := rc.local[f]; len(local) > 1 && !rc.masqueradeAll {
		var rules []string
		for _, m := range local {
			rules = append(rules, join(m, comment("kube-ipvs: from a cluster CIDR: keep the pod address"), "-j RETURN"))
		}
		rules = append(rules, "-j "+ChainMarkMasq)
		nat = append(nat, chainRules{chainKey{tableNAT, ChainClusterMasq}, rules})
	}
	checks := []string{
		"-m conntrack --ctstate NEW -j " + ChainFirewall,
		"-m conntrack --ctstate NEW -j " + ChainServices,
	}
	// Routed on, not delivered: only FORWARD and OUTPUT can see a Service CIDR address.
	routed := append(slices.Clone(checks), "-m conntrack --ctstate NEW -j "+ChainServiceCIDRs)
	filter := []chainRules{
		{chainKey{tableFilter, ChainFirewall}, nil},
		{chainKey{tableFilter, ChainServices}, nil},
		{chainKey{tableFilter, ChainNodePorts}, nil},
		{chainKey{tableFilter, ChainServiceCIDRs}, serviceCIDRRules(f, rc)},
		{chainKey{tableFilter, ChainInput}, append(slices.Clone(checks), "-j "+ChainNodePorts)},
		{chainKey{tableFilter, ChainForward}, append(routed,
			join("-m conntrack --ctstate INVALID", comment("kube-ipvs: out-of-window packets of NATed connections would reach endpoints un-NATed"), "-j DROP"),
			join("-m mark --mark "+mark, comment("kube-ipvs: Service traffic marked for masquerade"), "-j ACCEPT"),
			join("-m conntrack --ctstate RELATED,ESTABLISHED", comment("kube-ipvs: Service connections and their replies"), "-j ACCEPT"))},
		{chainKey{tableFilter, ChainOutput}, routed},
	}
	jump := func(table, builtin, why, target string) dispatchRule {
		return dispatchRule{table, builtin, join(comment("kube-ipvs: "+why), "-j "+target)}
	}
	jumps = []dispatchRule{
		jump(tableNAT, "PREROUTING", "Service dispatch", ChainServices),
		jump(tableNAT, "OUTPUT", "Service dispatch for node-originated traffic", ChainServices),
		jump(tableNAT, "POSTROUTING", "masquerade Service traffic", ChainPostrouting),
		jump(tableFilter, "INPUT", "source ranges, rejects, health-check node ports", ChainInput),
		jump(tableFilter, "FORWARD", "source ranges, rejects, forwarded Service traffic", ChainForward),
		jump(tableFilter, "OUTPUT", "source ranges and rejects for node-originated traffic", ChainOutput),
	}
	return append(nat, filter...), jumps
}

// serviceCIDRRules reject new connections into the family's Service CIDRs that DNAT left
// there, but never to an address of the node's own.
func serviceCIDRRules(f family, rc *renderConfig) []string {
	if len(rc.serviceCIDRs[f]) == 0 {
		return nil
	}
	rules := []string{join("-m addrtype --dst-type LOCAL", comment("kube-ipvs: addresses of the node itself are never refused"), "-j RETURN")}
	for _, p := range rc.serviceCIDRs[f] {
		rules = append(rules, join("-d "+p.String(),
			comment("kube-ipvs: an address or port in a Service CIDR that no Service holds: refuse at once"),
			"-j REJECT --reject-with "+rejectWith(f, 0)))
	}
	return rules
}

func hasFamily(addrs map[netip.Addr]bool, f family) bool {
	for a := range addrs {
		if familyOf(a) == f {
			return true
		}
	}
	return false
}

package firewall

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/kube-ipvs/kube-ipvs/model"
)

// DefaultMasqueradeMark is the packet-mark bit that asks POSTROUTING to masquerade.
const DefaultMasqueradeMark uint32 = 0x4000

// Config is what the rules and entries depend on: proxy-wide settings only, never
// Services.
type Config struct {
	// IPv4 and IPv6 enable the families (sets, entries and rules). A Config with neither
	// enables both.
	IPv4, IPv6 bool
	// ClusterCIDRs (--cluster-cidr, any families) are the pod networks: traffic to a
	// ClusterIP from outside them is masqueraded, so replies come back through this node.
	// Without them (and without MasqueradeAll), ClusterIP traffic keeps its source
	// address, except hairpin and node-originated connections, which are always
	// masqueraded.
	ClusterCIDRs []netip.Prefix
	// LocalInterface, when set, tells pod traffic by the interface it arrives on instead
	// of by ClusterCIDRs, which are then not read: an iptables input interface, a bridge
	// ("br0", kube-proxy's detectLocalMode BridgeInterface) or a name prefix ("veth+",
	// InterfaceNamePrefix). Node-originated traffic arrives on no interface, so it is
	// never local, as with CIDRs.
	LocalInterface string
	// MasqueradeAll (--masquerade-all) masquerades every connection to a ClusterIP.
	MasqueradeAll bool
	// MasqueradeMark is the single mark bit used to ask for masquerade; 0 means
	// DefaultMasqueradeMark.
	MasqueradeMark uint32
	// NodeIPs are the node's own addresses. A load balancer whose source ranges contain one
	// of them is reachable from the node itself (which uses the LB IP as its source
	// address toward a VIP it holds); otherwise the node is filtered like anyone else.
	NodeIPs []netip.Addr
}

// Families are the families c enables, IPv4 first.
func (c Config) Families() []Family {
	switch {
	case c.IPv4 && !c.IPv6:
		return []Family{IPv4}
	case c.IPv6 && !c.IPv4:
		return []Family{IPv6}
	}
	return []Family{IPv4, IPv6}
}

// inClusterMarkMask are the bits that tell an in-cluster mark (model.InClusterMark): its
// own bit, and neither the masquerade bit nor kube-proxy's drop bit.
const inClusterMarkMask = model.InClusterMarkBit | 0xc000

// Validate reports a Config that cannot be rendered.
func (c Config) Validate() error {
	m := c.Mark()
	if m == 0 || m&(m-1) != 0 {
		return fmt.Errorf("masquerade mark %#x must be a single bit", m)
	}
	if m == model.InClusterMarkBit {
		// In-cluster packets are told apart by this bit, before any masquerade decision.
		return fmt.Errorf("masquerade mark %#x is the in-cluster mark bit", m)
	}
	for _, p := range c.ClusterCIDRs {
		if !p.IsValid() {
			return fmt.Errorf("cluster CIDR %v is not valid", p)
		}
	}
	if i := c.LocalInterface; i != "" && (len(i) > 15 || strings.ContainsAny(i, " \t\n\"/:") || strings.Contains(strings.TrimSuffix(i, "+"), "+")) {
		return fmt.Errorf("local interface %q is not an iptables interface match (a name of at most 15 characters, or a prefix ending in +)", i)
	}
	return nil
}

// LocalMatches are the iptables matches of traffic from this node's pods in family f: one
// "-s CIDR" per cluster CIDR of the family, or the one "-i LocalInterface". None means pod
// traffic cannot be told apart in f.
func (c Config) LocalMatches(f Family) []string {
	if c.LocalInterface != "" {
		return []string{"-i " + c.LocalInterface}
	}
	var out []string
	for _, p := range familyCIDRs(c, f) {
		out = append(out, "-s "+p.String())
	}
	return out
}

// Mark is the masquerade mark bit in use: MasqueradeMark, or DefaultMasqueradeMark for 0.
func (c Config) Mark() uint32 {
	if c.MasqueradeMark == 0 {
		return DefaultMasqueradeMark
	}
	return c.MasqueradeMark
}

// Chains kube-ipvs owns. Each lives in one table; the built-in chains jump to the entry
// chains, inserted first so that no other rule decides before them.
const (
	// mangle: KIPVS-FIREWALL (from PREROUTING and OUTPUT) drops load-balancer traffic from
	// sources outside loadBalancerSourceRanges. mangle runs before IPVS on both paths: IPVS
	// takes packets from remote clients and pods at LOCAL_IN (after filter INPUT, which
	// would do too) but node-originated ones at LOCAL_OUT right after nat OUTPUT, before
	// filter OUTPUT ever sees the LB IP; mangle OUTPUT is earlier still and may DROP.
	ChainFirewall = "KIPVS-FIREWALL"
	// mangle: KIPVS-IN-CLUSTER (from PREROUTING and OUTPUT) gives traffic from the cluster
	// CIDR and from the node to an externalTrafficPolicy Local address its in-cluster mark
	// (SetInClusterLocal), so IPVS sends it to the firewall-mark virtual server with every
	// endpoint; outside clients keep the address virtual server with the local ones.
	ChainInCluster = "KIPVS-IN-CLUSTER"
	// nat: KIPVS-SERVICES (from PREROUTING, and via KIPVS-OUTPUT from OUTPUT) marks
	// connections to masquerade; KIPVS-POSTROUTING masquerades them and hairpin connections;
	// KIPVS-MARK-MASQ sets the mark; KIPVS-CLUSTER-MASQ decides for ClusterIPs by source.
	ChainServices    = "KIPVS-SERVICES"
	ChainOutput      = "KIPVS-OUTPUT"
	ChainPostrouting = "KIPVS-POSTROUTING"
	ChainMarkMasq    = "KIPVS-MARK-MASQ"
	ChainClusterMasq = "KIPVS-CLUSTER-MASQ"
	ChainInput       = "KIPVS-INPUT"
	ChainVIPFilter   = "KIPVS-VIP-FILTER"
	ChainForward     = "KIPVS-FORWARD"
	// filter: KIPVS-CIDR-FILTER (from KIPVS-FORWARD and from OUTPUT) rejects new
	// connections to an address in a Service CIDR that no Service holds. Such an address is
	// not on kube-ipvs0, so the packet is routed on (FORWARD for pods and other hosts,
	// OUTPUT for the node) rather than delivered (INPUT, where the VIP filter is).
	ChainCIDRFilter   = "KIPVS-CIDR-FILTER"
	commentJumpPrefix = "kube-ipvs: "
)

// RenderRules returns the complete iptables-restore input (v4) and ip6tables-restore input
// (v6) for kube-ipvs' chains, or "" for a family cfg does not enable. It depends on cfg
// only: the text, and so the rule count, is the same for any number of Services, ports and
// endpoints. Apply it with --noflush: declaring a chain flushes it, and the built-in
// chains' other rules stay. The jump rules into our chains are written as "-I <chain> 1";
// package iptables keeps each of them first and present once.
//
// RenderRules panics on an invalid Config (see Validate).
func RenderRules(cfg Config) (v4, v6 string) {
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	for _, f := range cfg.Families() {
		if f == IPv4 {
			v4 = render(cfg, IPv4)
		} else {
			v6 = render(cfg, IPv6)
		}
	}
	return v4, v6
}

type writer struct {
	b strings.Builder
	f Family
}

func (w *writer) line(s string) { w.b.WriteString(s); w.b.WriteByte('\n') }

func (w *writer) table(name string, chains ...string) {
	w.line("*" + name)
	for _, c := range chains {
		w.line(":" + c + " - [0:0]")
	}
}

// rule appends a rule; the comment, which says why the rule exists, goes before the target.
func (w *writer) rule(chain, match, comment, target string) {
	var b strings.Builder
	b.WriteString("-A " + chain)
	if match != "" {
		b.WriteString(" " + match)
	}
	if comment != "" {
		b.WriteString(` -m comment --comment "` + comment + `"`)
	}
	b.WriteString(" -j " + target)
	w.line(b.String())
}

func (w *writer) jump(builtin, comment, target string) {
	w.line("-I " + builtin + " 1 -m comment --comment \"" + commentJumpPrefix + comment + "\" -j " + target)
}

func (w *writer) set(base, flags string) string {
	return "-m set --match-set " + string(Name(base, w.f)) + " " + flags
}

func (w *writer) notSet(base, flags string) string {
	return "-m set ! --match-set " + string(Name(base, w.f)) + " " + flags
}

// render writes one family's rules, table by table.
func render(cfg Config, f Family) string {
	w := &writer{f: f}
	name := "IPv4"
	if f == IPv6 {
		name = "IPv6"
	}
	w.line("# kube-ipvs " + name + " rules for iptables-restore --noflush. Generated from the proxy's")
	w.line("# configuration only: Services, ports and endpoints are ipset entries, never rules.")
	w.mangle(cfg)
	w.nat(cfg)
	w.filter()
	return w.b.String()
}

// mangle writes the load-balancer source ranges and the in-cluster marks, ahead of IPVS on
// every path (mangle runs before IPVS at LOCAL_IN and at LOCAL_OUT).
func (w *writer) mangle(cfg Config) {
	w.table("mangle", ChainFirewall, ChainInCluster)
	w.rule(ChainFirewall,
		w.set(SetLoadBalancerFW, "dst,dst")+" "+w.notSet(SetLBSourceCIDR, "dst,dst,src")+" "+w.notSet(SetLBSourceIP, "dst,dst,src"),
		"loadBalancerSourceRanges: drop sources outside the ranges, node-originated too (k8s #119656)", "DROP")
	// The SET target marks only packets whose destination has an entry, with the entry's
	// mark as the whole mark: IPVS matches a firewall-mark virtual server on all 32 bits.
	mark := "SET --map-set " + string(Name(SetInClusterLocal, w.f)) + " dst,dst --map-mark"
	for _, m := range cfg.LocalMatches(w.f) {
		w.rule(ChainInCluster, m, "externalTrafficPolicy Local from a pod: every endpoint, through the firewall-mark virtual server", mark)
	}
	w.rule(ChainInCluster, "-m addrtype --src-type LOCAL", "externalTrafficPolicy Local from the node itself: every endpoint too", mark)
	// Inserted first, so the source-range jumps (inserted after them) come before them.
	w.jump("PREROUTING", "in-cluster traffic to externalTrafficPolicy Local addresses", ChainInCluster)
	w.jump("OUTPUT", "node-originated traffic to externalTrafficPolicy Local addresses", ChainInCluster)
	w.jump("PREROUTING", "load-balancer source ranges", ChainFirewall)
	w.jump("OUTPUT", "load-balancer source ranges for node-originated traffic", ChainFirewall)
	w.line("COMMIT")
}

// familyCIDRs are the cluster CIDRs of the writer's family, masked.
func familyCIDRs(cfg Config, f Family) []netip.Prefix {
	var cidrs []netip.Prefix
	for _, p := range cfg.ClusterCIDRs {
		if FamilyOf(p.Addr()) == f {
			cidrs = append(cidrs, p.Masked())
		}
	}
	return cidrs
}

// nat decides what to masquerade before IPVS rewrites the destination, and masquerades after.
func (w *writer) nat(cfg Config) {
	mark := fmt.Sprintf("%#x", cfg.Mark())
	// The whole layout of model.IsInClusterMark, not the bit alone: a packet another tool
	// marked with 0x2000 among other bits is not ours to masquerade.
	inCluster := fmt.Sprintf("-m mark --mark %#x/%#x -m mark ! --mark 0x0/0xffff0000 -m mark ! --mark 0x0/0x3",
		model.InClusterMarkBit, inClusterMarkMask)
	local := cfg.LocalMatches(w.f)
	chains := []string{ChainServices, ChainOutput, ChainPostrouting, ChainMarkMasq}
	clusterMasq := !cfg.MasqueradeAll && len(local) > 0
	if clusterMasq {
		chains = append(chains, ChainClusterMasq)
	}
	w.table("nat", chains...)
	w.rule(ChainMarkMasq, "", "ask KIPVS-POSTROUTING to masquerade this connection", "MARK --or-mark "+mark)
	switch {
	case cfg.MasqueradeAll:
		w.rule(ChainServices, w.set(SetClusterIP, "dst,dst"), "--masquerade-all: masquerade every connection to a ClusterIP", ChainMarkMasq)
	case clusterMasq:
		w.rule(ChainServices, w.set(SetClusterIP, "dst,dst"), "ClusterIP: decide by source", ChainClusterMasq)
		from := "the cluster CIDR"
		if cfg.LocalInterface != "" {
			from = "the pod interfaces"
		}
		for _, m := range local {
			w.rule(ChainClusterMasq, m, "from "+from+": pods keep their source address", "RETURN")
		}
		w.rule(ChainClusterMasq, "", "from outside "+from+": masquerade so replies return through this node", ChainMarkMasq)
	}
	w.rule(ChainServices, w.set(SetExternalIP, "dst,dst"), "externalIP with externalTrafficPolicy Cluster: the endpoint may be on another node", ChainMarkMasq)
	w.rule(ChainServices, w.set(SetLoadBalancer, "dst,dst"), "load balancer with externalTrafficPolicy Cluster: the endpoint may be on another node", ChainMarkMasq)
	w.rule(ChainServices, w.set(SetNodePort, "dst,dst"), "NodePort with externalTrafficPolicy Cluster: the endpoint may be on another node", ChainMarkMasq)
	w.rule(ChainOutput, inCluster,
		"in-cluster mark: IPVS matches the whole mark, so no masquerade bit is added (KIPVS-POSTROUTING masquerades it)", "RETURN")
	w.rule(ChainOutput, w.set(SetVIPs, "src"),
		"node-originated with a VIP as source (what the node picks toward a VIP it holds): no other host could reply to it", ChainMarkMasq)
	w.rule(ChainOutput, "", "node-originated traffic follows the same masquerade rules", ChainServices)
	w.rule(ChainPostrouting, w.set(SetLoopBack, "dst,dst,src"),
		"hairpin: a client chosen as the endpoint of its own Service must see the reply come from the Service", "MASQUERADE")
	w.rule(ChainPostrouting, inCluster,
		"in-cluster traffic to an externalTrafficPolicy Local address may go to another node, even back to the client node: replies must return through this node", "MASQUERADE")
	w.rule(ChainPostrouting, "-m mark ! --mark "+mark+"/"+mark, "not marked for masquerade", "RETURN")
	w.rule(ChainPostrouting, "", "clear the mark, so a re-routed packet is not masqueraded twice", "MARK --xor-mark "+mark)
	w.rule(ChainPostrouting, "", "masquerade connections marked in KIPVS-SERVICES", "MASQUERADE")
	w.jump("PREROUTING", "mark Service traffic to masquerade", ChainServices)
	w.jump("OUTPUT", "mark node-originated Service traffic to masquerade", ChainOutput)
	w.jump("POSTROUTING", "masquerade marked and hairpin Service traffic", ChainPostrouting)
	w.line("COMMIT")
}

// filter writes the VIP filter, health checks and NodePorts, forwarded replies, and the
// rejection of unallocated Service addresses.
func (w *writer) filter() {
	icmp := "icmp"
	if w.f == IPv6 {
		icmp = "ipv6-icmp"
	}
	w.table("filter", ChainInput, ChainVIPFilter, ChainForward, ChainCIDRFilter)
	w.rule(ChainInput, "-m conntrack --ctstate NEW "+w.set(SetVIPs, "dst"),
		"new connection to a VIP: only to a port a Service exposes there", ChainVIPFilter)
	w.rule(ChainInput, "-p tcp -m set --match-set "+SetHealthCheckNodePort+" dst",
		"health-check node port of an externalTrafficPolicy Local load balancer", "ACCEPT")
	w.rule(ChainInput, w.set(SetNodePort, "dst,dst"), "NodePort, externalTrafficPolicy Cluster", "ACCEPT")
	w.rule(ChainInput, w.set(SetNodePortLocal, "dst,dst"), "NodePort, externalTrafficPolicy Local", "ACCEPT")
	for _, s := range []string{SetClusterIP, SetExternalIP, SetExternalIPLocal, SetLoadBalancer, SetLoadBalancerLocal} {
		w.rule(ChainVIPFilter, w.set(s, "dst,dst"), "a Service port: IPVS takes it", "RETURN")
	}
	w.rule(ChainVIPFilter, "-p "+icmp, "ping and errors to a VIP stay answered", "RETURN")
	w.rule(ChainVIPFilter, "",
		"no Service on this VIP and port: a node process on 0.0.0.0 must not be reachable here (k8s #72236)", "REJECT")
	// Only replies from one of our real servers: SetLoopBack holds every real server as
	// ip,proto:port,ip, so src,src,src matches exactly a packet from a real server's address
	// and port. A global drop would cut traffic that is not ours: a TCP handshake routed
	// asymmetrically through the node (k8s #94861), or the replies of another IPVS virtual
	// server whose connections conntrack does not follow (net.ipv4.vs.conntrack=0).
	w.rule(ChainForward, "-m conntrack --ctstate INVALID "+w.set(SetLoopBack, "src,src,src"),
		"out-of-window replies from endpoints would reach clients un-NATed and be answered with RST", "DROP")
	w.rule(ChainForward, "-m conntrack --ctstate RELATED,ESTABLISHED",
		"replies from endpoints cross FORWARD before IPVS un-NATs them; a DROP policy must not cut them", "ACCEPT")
	w.rule(ChainForward, "", "new connections from pods and other hosts to a Service CIDR", ChainCIDRFilter)
	// A VIP is exempt even before its address is bound (its entry comes first), and so is
	// every address of the node, whatever the CIDRs hold.
	w.rule(ChainCIDRFilter,
		"-m conntrack --ctstate NEW "+w.set(SetServiceCIDRs, "dst")+" "+w.notSet(SetVIPs, "dst")+" -m addrtype ! --dst-type LOCAL",
		"an address in a Service CIDR that no Service holds: refuse at once rather than leak to the default route", "REJECT")
	w.jump("INPUT", "VIP filter, health-check and node ports", ChainInput)
	w.jump("FORWARD", "replies of Service connections, unallocated Service addresses", ChainForward)
	w.jump("OUTPUT", "unallocated Service addresses for node-originated traffic", ChainCIDRFilter)
	w.line("COMMIT")
}

// Package model holds the plain values that flow between the pure desired-state function
// (package proxy) and the kernel reconcilers (packages ipvs and dummyif). It has no I/O and
// imports neither netlink nor client-go, so everything built on it can be table-tested.
package model

import (
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Protocol is an L4 protocol IPVS balances.
type Protocol uint8

// Values are the IANA protocol numbers, which is what IPVS and netlink use.
const (
	TCP  Protocol = 6
	UDP  Protocol = 17
	SCTP Protocol = 132
)

var protocolNames = map[Protocol]string{TCP: "TCP", UDP: "UDP", SCTP: "SCTP"}

func (p Protocol) String() string { return EnumName(protocolNames, p, "proto-") }

// ServiceName identifies a Kubernetes Service.
type ServiceName struct {
	Namespace, Name string
}

func (s ServiceName) String() string { return s.Namespace + "/" + s.Name }

// VSKey identifies an IPVS virtual server, as the kernel does: address, protocol, port; or,
// for a firewall-mark virtual server, mark and family (FWMarkKey).
type VSKey struct {
	Addr  netip.Addr
	Proto Protocol
	Port  uint16
	// FWMark, when not 0, makes this a firewall-mark virtual server. The kernel keys those
	// by mark and family alone, so Addr is only the family's unspecified address and Proto
	// and Port are 0.
	FWMark uint32
}

// FWMarkKey is the key of the firewall-mark virtual server of mark in one family.
func FWMarkKey(mark uint32, is6 bool) VSKey {
	if is6 {
		return VSKey{Addr: netip.IPv6Unspecified(), FWMark: mark}
	}
	return VSKey{Addr: netip.IPv4Unspecified(), FWMark: mark}
}

func (k VSKey) String() string {
	if k.FWMark != 0 {
		fam := "IPv4"
		if k.Addr.Is6() {
			fam = "IPv6"
		}
		return fmt.Sprintf("FWM %#x %s", k.FWMark, fam)
	}
	return fmt.Sprintf("%s %s", k.Proto, netip.AddrPortFrom(k.Addr, k.Port))
}

// Service flags, as in linux/ip_vs.h. SCHED1 and SCHED2 mean fallback and port for both sh
// and mh.
const (
	FlagPersistent  uint32 = 0x0001
	FlagHashed      uint32 = 0x0002 // set by the kernel on every service; never ours to set
	FlagOnePacket   uint32 = 0x0004
	FlagSchedFallbk uint32 = 0x0008 // sh-fallback, mh-fallback
	FlagSchedPort   uint32 = 0x0010 // sh-port, mh-port
	FlagSched3      uint32 = 0x0020
)

// FlagsWeManage are the service flag bits the proxy decides; other bits the kernel reports
// (such as FlagHashed) are ignored when comparing.
const FlagsWeManage = FlagPersistent | FlagOnePacket | FlagSchedFallbk | FlagSchedPort | FlagSched3

// VSSpec is everything about a virtual server that can change in place (UpdateService):
// changing it never deletes and re-creates the virtual server.
type VSSpec struct {
	Scheduler string
	Flags     uint32 // a subset of FlagsWeManage
	Timeout   uint32 // persistence timeout in seconds; meaningful with FlagPersistent
}

// RSKey identifies a real server of one virtual server.
type RSKey struct {
	Addr netip.Addr
	Port uint16
}

func (k RSKey) String() string { return netip.AddrPortFrom(k.Addr, k.Port).String() }

// VSKind says where a virtual server's address comes from. Every backend needs it: the
// ipsets and the iptables fallback treat a ClusterIP, an external IP, a load-balancer IP and
// a node IP differently, and they must agree with package proxy on which is which.
type VSKind uint8

// The kinds, in the order package proxy claims them when two sources name the same
// address and port.
const (
	KindClusterIP VSKind = iota
	KindExternalIP
	KindLoadBalancer
	KindNodePort
	// KindInCluster is the firewall-mark virtual server that in-cluster clients of an
	// externalTrafficPolicy: Local Service port reach (see InClusterMark).
	KindInCluster
)

var kindNames = map[VSKind]string{KindClusterIP: "ClusterIP", KindExternalIP: "ExternalIP",
	KindLoadBalancer: "LoadBalancer", KindNodePort: "NodePort", KindInCluster: "InCluster"}

func (k VSKind) String() string { return EnumName(kindNames, k, "kind-") }

// EnumName is a small enum's name from its table, or prefix and the number for a value the
// table lacks.
func EnumName[E ~uint8](names map[E]string, v E, prefix string) string {
	if n, ok := names[v]; ok {
		return n
	}
	return prefix + strconv.Itoa(int(v))
}

// VirtualServer is one desired IPVS virtual server with its real servers and weights.
// Forwarding is always masquerade (NAT).
type VirtualServer struct {
	Key  VSKey
	Spec VSSpec
	Kind VSKind
	// Reals maps each real server to its weight. The virtual servers of one Service port
	// that have the same address family and traffic policy (say, its external IPs and
	// NodePorts) share one map: it is read-only once built.
	// At 50,000 Services a copy per virtual server cost tens of MiB.
	Reals map[RSKey]uint32
	// PortName is the Service port's name, for metrics labels; not part of the kernel state.
	PortName string
	// InClusterMark, on the external virtual servers of an externalTrafficPolicy: Local
	// port, is the mark the firewall gives in-cluster traffic to this address and port, which
	// sends it to the firewall-mark virtual server of that mark; 0 on all others. Not part
	// of the kernel state of this virtual server.
	InClusterMark uint32
	// NoLocalEndpoints: the virtual server's traffic policy is Local and the port has usable
	// endpoints, none of them on this node (Reals is then empty). The iptables fallback drops
	// such traffic, as kube-proxy does, instead of refusing it as a port without endpoints.
	// Not part of the kernel state.
	NoLocalEndpoints bool
}

// ServiceState is the desired kernel state of one Service: its virtual servers, the
// addresses to bind to kube-ipvs0, and the Service-wide policy the ipsets and the iptables
// fallback need. It is complete: nothing downstream of package proxy reads the Service.
// Node IPs (NodePort virtual servers) and the node's own addresses are never bound.
type ServiceState struct {
	Name ServiceName
	VSes map[VSKey]*VirtualServer
	// Bind are the addresses to bind, without repeats: a list, not a set, as a Service has
	// one or a few (a map per Service cost about 400 bytes at 10,000 Services and more).
	Bind    []netip.Addr
	Reasons []Problem // what was wrong with the Service's input, already worked around
	// Choices says, per port, family and traffic policy in use, which endpoints became real
	// servers and why each other one did not (for `kube-ipvs explain`; nil: none). It is
	// worked out when asked (EndpointChoices), not kept: only explain and list read it, and
	// kept for every Service it was the largest part of the desired state (about 2 KiB per
	// Service of 10 endpoints).
	Choices ChoiceSource

	// LoadBalancer: the Service is of type LoadBalancer (its health-check node port is
	// opened in the firewall).
	LoadBalancer bool
	// ExternalLocal is externalTrafficPolicy: Local (NodePort, external and load-balancer
	// virtual servers keep the client address and use only local endpoints).
	ExternalLocal bool
	// SourceRanges are the load-balancer source ranges.
	SourceRanges SourceRanges
	// HealthCheckNodePort is set for externalTrafficPolicy=Local Services that have one:
	// the proxy answers health checks there with LocalEndpoints.
	HealthCheckNodePort uint16
	LocalEndpoints      int
	// HealthCheck is the Service's backend health check (nil: none, the default).
	HealthCheck *HealthCheck
	// NoLocal says, per family (IPv4 [0], IPv6 [1]), which of the Service's Local traffic
	// policies have endpoints in the cluster but none on this node (kube-proxy's
	// sync_proxy_rules_no_local_endpoints_total counts such Services).
	NoLocal [2]LocalGap
}

// LocalGap names the Local traffic policies of one family that have no endpoint on this
// node while the cluster has some: Internal for the ClusterIPs (internalTrafficPolicy),
// External for the node ports, external and load-balancer addresses
// (externalTrafficPolicy).
type LocalGap struct {
	Internal, External bool
}

// Binds reports whether the Service wants a bound to kube-ipvs0.
func (s *ServiceState) Binds(a netip.Addr) bool { return slices.Contains(s.Bind, a) }

// EndpointChoices returns the Service's endpoint choices (see Choices), in a new slice.
func (s *ServiceState) EndpointChoices() []EndpointChoice {
	if s.Choices == nil {
		return nil
	}
	return s.Choices.EndpointChoices()
}

// SourceRanges are a Service's load-balancer source ranges by family, as the IPVS mode's
// ipsets and the iptables mode's rules both read them.
type SourceRanges struct {
	// Set says the Service has source ranges at all, even if none of them parses: it is then
	// filtered (and admits no one but what is always allowed), never left open.
	Set bool
	// ByFamily are the ranges, masked and without duplicates, IPv4 ([0]) and IPv6 ([1]);
	// IPv4-mapped ranges count as IPv4. A range covering a whole family is not listed:
	// All says so instead.
	ByFamily [2][]netip.Prefix
	All      [2]bool
}

// Of returns the ranges of one family (IPv6 when is6) and whether that family's
// load-balancer traffic is filtered: a Service with source ranges filters every family
// unless a range covers all of it, so a family without ranges of its own admits no one.
func (r SourceRanges) Of(is6 bool) ([]netip.Prefix, bool) {
	f := 0
	if is6 {
		f = 1
	}
	if !r.Set || r.All[f] {
		return nil, false
	}
	return r.ByFamily[f], true
}

// ContainsAny reports whether a range holds one of the addresses (IPv4-mapped ones as IPv4).
func ContainsAny(ps []netip.Prefix, addrs []netip.Addr) bool {
	for _, p := range ps {
		for _, a := range addrs {
			if p.Contains(a.Unmap()) {
				return true
			}
		}
	}
	return false
}

// Problem is something wrong with a Service that the proxy worked around: a user should see
// it as a Warning Event on the Service.
type Problem struct {
	Reason  string // CamelCase, e.g. InvalidScheduler
	Message string
}

func (p Problem) String() string { return p.Reason + ": " + p.Message }

// Equal reports whether two virtual servers have the same kernel state: the same spec and
// the same real servers with the same weights (Kind and PortName are not kernel state).
func (v *VirtualServer) Equal(o *VirtualServer) bool {
	if v.Key != o.Key || v.Spec != o.Spec || len(v.Reals) != len(o.Reals) {
		return false
	}
	for k, w := range v.Reals {
		if ow, ok := o.Reals[k]; !ok || ow != w {
			return false
		}
	}
	return true
}

// String renders a virtual server like one ipvsadm -Ln block, with real servers sorted: for
// golden files and test failure messages.
func (v *VirtualServer) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", v.Key, v.Spec.Scheduler)
	if v.Spec.Flags&FlagSchedFallbk != 0 {
		b.WriteString(" fallback")
	}
	if v.Spec.Flags&FlagSchedPort != 0 {
		b.WriteString(" port")
	}
	if v.Spec.Flags&FlagPersistent != 0 {
		fmt.Fprintf(&b, " persistent %d", v.Spec.Timeout)
	}
	keys := make([]RSKey, 0, len(v.Reals))
	for k := range v.Reals {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return RSKeyLess(keys[i], keys[j]) })
	for _, k := range keys {
		fmt.Fprintf(&b, "\n  -> %s weight %d", k, v.Reals[k])
	}
	return b.String()
}

// RSKeyLess orders real servers by address, then port.
func RSKeyLess(a, b RSKey) bool {
	if c := a.Addr.Compare(b.Addr); c != 0 {
		return c < 0
	}
	return a.Port < b.Port
}

// VSKeyLess orders virtual servers by address, protocol, port.
func VSKeyLess(a, b VSKey) bool {
	if c := a.Addr.Compare(b.Addr); c != 0 {
		return c < 0
	}
	if a.Proto != b.Proto {
		return a.Proto < b.Proto
	}
	if a.Port != b.Port {
		return a.Port < b.Port
	}
	return a.FWMark < b.FWMark
}

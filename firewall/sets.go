package firewall

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/kube-ipvs/kube-ipvs/model"
)

// Prefix starts the name of every ipset and iptables chain kube-ipvs owns. Nothing without
// it is ever written or deleted; kube-proxy's KUBE- names are never used.
const Prefix = "KIPVS-"

// MaxSetNameLen is the longest set name the kernel takes (IPSET_MAXNAMELEN 32 with the
// terminating NUL). Our names stay two bytes shorter, so a temporary twin (TempName) fits.
const MaxSetNameLen = 31

// Family is an address family of a set or of rules.
type Family uint8

const (
	// AnyFamily is for sets that hold ports only (bitmap:port): one set serves IPv4 and
	// IPv6 rules alike.
	AnyFamily Family = 0
	IPv4      Family = 4
	IPv6      Family = 6
)

var familyNames = map[Family]string{IPv4: "inet", IPv6: "inet6", AnyFamily: "any"}

func (f Family) String() string { return model.EnumName(familyNames, f, "family-") }

// FamilyOf returns the family of an address (IPv4-mapped IPv6 counts as IPv4).
func FamilyOf(a netip.Addr) Family {
	if a.Unmap().Is4() {
		return IPv4
	}
	return IPv6
}

// SetName is the kernel name of one ipset.
type SetName string

// SetType is an ipset type, spelled as the kernel and the ipset tool spell it.
type SetType string

const (
	HashIP          SetType = "hash:ip"
	HashNet         SetType = "hash:net"
	HashIPPort      SetType = "hash:ip,port"
	HashIPPortIP    SetType = "hash:ip,port,ip"
	HashIPPortNet   SetType = "hash:ip,port,net"
	BitmapPort      SetType = "bitmap:port"
	bitmapPortFirst         = 0
	bitmapPortLast          = 65535
)

// Base names of the sets; the IPv6 twin of each family set adds "-6" (Name).
const (
	// SetClusterIP holds ClusterIP,proto:port of every Service port.
	SetClusterIP = "KIPVS-CLUSTER-IP"
	// SetLoopBack holds endpointIP,proto:endpointPort,endpointIP: a real server that is also
	// the client (a pod reaching its own Service) must be masqueraded, or it would answer
	// itself directly and the client would drop the reply.
	SetLoopBack = "KIPVS-LOOP-BACK"
	// SetExternalIP holds externalIP,proto:port of Services with externalTrafficPolicy
	// Cluster (masqueraded); SetExternalIPLocal those with Local (client IP kept).
	SetExternalIP      = "KIPVS-EXTERNAL-IP"
	SetExternalIPLocal = "KIPVS-EXTERNAL-IP-LOCAL"
	// SetLoadBalancer and SetLoadBalancerLocal are the same for load-balancer ingress IPs.
	SetLoadBalancer      = "KIPVS-LOAD-BALANCER"
	SetLoadBalancerLocal = "KIPVS-LOAD-BALANCER-LOCAL"
	// SetLoadBalancerFW holds lbIP,proto:port of load balancers with source ranges: only
	// sources in SetLBSourceCIDR or SetLBSourceIP for that ip,port get through.
	SetLoadBalancerFW = "KIPVS-LOAD-BALANCER-FW"
	// SetLBSourceCIDR holds lbIP,proto:port,sourceRange.
	SetLBSourceCIDR = "KIPVS-LB-SOURCE-CIDR"
	// SetLBSourceIP holds lbIP,proto:port,sourceIP for sources allowed regardless of the
	// ranges: the Service's own endpoints (hairpin through the load balancer) and, when a
	// range holds a node IP, the LB IP itself (what the node uses as source toward a VIP it
	// holds).
	SetLBSourceIP = "KIPVS-LB-SOURCE-IP"
	// SetNodePort holds nodeIP,proto:nodePort of Services with externalTrafficPolicy
	// Cluster; SetNodePortLocal those with Local. With the node IP and the protocol in the
	// entry, one set covers TCP, UDP and SCTP, and IPv6 works like IPv4.
	SetNodePort      = "KIPVS-NODE-PORT"
	SetNodePortLocal = "KIPVS-NODE-PORT-LOCAL"
	// SetHealthCheckNodePort holds the healthCheckNodePort of every externalTrafficPolicy
	// Local load balancer (TCP). It has no family.
	SetHealthCheckNodePort = "KIPVS-HEALTH-CHECK-NODE-PORT"
	// SetVIPs holds every address bound to kube-ipvs0 (ClusterIPs, external IPs, LB IPs).
	SetVIPs = "KIPVS-VIPS"
	// SetInClusterLocal holds address,proto:port, marked with the port's in-cluster mark
	// (model.InClusterMark), of every external address of an externalTrafficPolicy: Local
	// port: LB and external IPs, node IPs with the node port. The rules give traffic from
	// the cluster CIDR and the node itself the entry's mark, which takes it to the
	// firewall-mark virtual server with every endpoint.
	SetInClusterLocal = "KIPVS-IN-CLUSTER-LOCAL"
	// SetServiceCIDRs holds the cluster's Service CIDRs (ServiceCIDR objects, or
	// --service-cidr): new connections to an address there that is not a VIP are rejected
	// instead of leaking to the default route. Its entries come from the proxy's
	// configuration and the API, never from a Service (ServiceCIDREntries).
	SetServiceCIDRs = "KIPVS-SERVICE-CIDRS"
)

// SetDef is one set as the kernel must have it. Size (hashsize, maxelem) is not part of it:
// package ipset sizes each set to its content.
type SetDef struct {
	Name   SetName
	Type   SetType
	Family Family // AnyFamily for BitmapPort
	// PortFrom and PortTo bound a BitmapPort set.
	PortFrom, PortTo uint16
	// SkbInfo: the entries carry a packet mark (Entry.Mark) that the iptables SET target
	// with --map-mark gives matching packets (ipset's skbinfo extension).
	SkbInfo bool
	// Comment says what the set is for (documentation; not stored in the kernel).
	Comment string
}

type baseSet struct {
	base    string
	typ     SetType
	comment string
	skbInfo bool
}

var familySets = []baseSet{
	{SetClusterIP, HashIPPort, "ClusterIP,proto:port of every Service port", false},
	{SetLoopBack, HashIPPortIP, "endpoint,proto:port,endpoint: hairpin connections to masquerade", false},
	{SetExternalIP, HashIPPort, "externalIP,proto:port, externalTrafficPolicy Cluster", false},
	{SetExternalIPLocal, HashIPPort, "externalIP,proto:port, externalTrafficPolicy Local", false},
	{SetLoadBalancer, HashIPPort, "loadBalancerIP,proto:port, externalTrafficPolicy Cluster", false},
	{SetLoadBalancerLocal, HashIPPort, "loadBalancerIP,proto:port, externalTrafficPolicy Local", false},
	{SetLoadBalancerFW, HashIPPort, "loadBalancerIP,proto:port with loadBalancerSourceRanges", false},
	{SetLBSourceCIDR, HashIPPortNet, "loadBalancerIP,proto:port,allowed source range", false},
	{SetLBSourceIP, HashIPPortIP, "loadBalancerIP,proto:port,allowed source IP (endpoints, the node)", false},
	{SetNodePort, HashIPPort, "nodeIP,proto:nodePort, externalTrafficPolicy Cluster", false},
	{SetNodePortLocal, HashIPPort, "nodeIP,proto:nodePort, externalTrafficPolicy Local", false},
	{SetVIPs, HashIP, "every address bound to kube-ipvs0", false},
	{SetServiceCIDRs, HashNet, "the cluster's Service CIDRs", false},
	{SetInClusterLocal, HashIPPort, "address,proto:port of externalTrafficPolicy Local, with the in-cluster mark", true},
}

// Name returns the name of the family's set with that base name: the base for IPv4 and
// AnyFamily, base + "-6" for IPv6.
func Name(base string, f Family) SetName {
	if f == IPv6 {
		return SetName(base + "-6")
	}
	return SetName(base)
}

// TempName returns the name of the temporary twin used to rebuild a set wholesale: it is
// filled completely, then swapped with the set in one kernel call.
func TempName(n SetName) SetName {
	return SetName(Prefix + "T-" + strings.TrimPrefix(string(n), Prefix))
}

// Sets returns the definitions of every set the rules of cfg use, IPv4 sets first.
func Sets(cfg Config) []SetDef {
	var out []SetDef
	for _, f := range cfg.Families() {
		for _, b := range familySets {
			out = append(out, SetDef{Name: Name(b.base, f), Type: b.typ, Family: f, Comment: b.comment, SkbInfo: b.skbInfo})
		}
	}
	out = append(out, SetDef{
		Name: SetHealthCheckNodePort, Type: BitmapPort, Family: AnyFamily,
		PortFrom: bitmapPortFirst, PortTo: bitmapPortLast,
		Comment: "healthCheckNodePort of every externalTrafficPolicy Local load balancer",
	})
	return out
}

// Entry is one member of a set. Which fields are used depends on the set's type:
//
//	hash:ip           IP
//	hash:net          Net
//	hash:ip,port      IP, Proto, Port
//	hash:ip,port,ip   IP, Proto, Port, IP2
//	hash:ip,port,net  IP, Proto, Port, Net
//	bitmap:port       Port
//
// Mark is the packet mark of an entry of a set with SkbInfo (0 in every other set).
// Unused fields are zero, so entries can be map keys and compared with ==.
type Entry struct {
	IP    netip.Addr
	Proto model.Protocol
	Port  uint16
	IP2   netip.Addr
	Net   netip.Prefix // masked
	Mark  uint32
}

// String renders the entry as the ipset tool does: "10.0.0.1,tcp:80",
// "10.0.0.1,tcp:80,10.1.0.0/16", "10.96.0.0/12", "30000".
func (e Entry) String() string {
	if !e.IP.IsValid() && e.Net.IsValid() {
		return e.Net.String()
	}
	if !e.IP.IsValid() {
		return strconv.Itoa(int(e.Port))
	}
	var b strings.Builder
	b.WriteString(e.IP.String())
	if e.Proto != 0 {
		b.WriteString(",")
		b.WriteString(strings.ToLower(e.Proto.String()))
		b.WriteString(":")
		b.WriteString(strconv.Itoa(int(e.Port)))
	}
	if e.IP2.IsValid() {
		b.WriteString(",")
		b.WriteString(e.IP2.String())
	}
	if e.Net.IsValid() {
		b.WriteString(",")
		b.WriteString(e.Net.String())
	}
	if e.Mark != 0 {
		fmt.Fprintf(&b, " skbmark %#x", e.Mark)
	}
	return b.String()
}

// Check reports whether e can be a member of the set: the fields its type uses are set, the
// others zero, and addresses are plain (no zone, not IPv4-mapped) and of the set's family.
//
// It allocates nothing for a valid entry: a repair checks every entry of every set.
func (d SetDef) Check(e Entry) error {
	// The checks in order; the first that fails is the answer.
	switch d.Type {
	case HashNet:
		if err := d.checkNetwork(&e); err != nil {
			return err
		}
		if e.IP.IsValid() || e.Proto != 0 || e.Port != 0 || e.IP2.IsValid() {
			return d.bad(&e, "only a network belongs in it")
		}
	case HashIP:
		if err := d.checkAddr(&e, e.IP); err != nil {
			return err
		}
		if e.Proto != 0 || e.Port != 0 || e.IP2.IsValid() || e.Net.IsValid() {
			return d.bad(&e, "only an address belongs in it")
		}
	case HashIPPort, HashIPPortIP, HashIPPortNet:
		if err := d.checkAddr(&e, e.IP); err != nil {
			return err
		}
		switch e.Proto {
		case model.TCP, model.UDP, model.SCTP:
		default:
			return d.bad(&e, "protocol must be TCP, UDP or SCTP")
		}
		switch d.Type {
		case HashIPPort:
			if e.IP2.IsValid() || e.Net.IsValid() {
				return d.bad(&e, "no third dimension")
			}
		case HashIPPortIP:
			if err := d.checkAddr(&e, e.IP2); err != nil {
				return err
			}
			if e.Net.IsValid() {
				return d.bad(&e, "third dimension is an address, not a network")
			}
		case HashIPPortNet:
			if e.IP2.IsValid() {
				return d.bad(&e, "third dimension is a network, not an address")
			}
			if err := d.checkNetwork(&e); err != nil {
				return err
			}
		}
	case BitmapPort:
		if e.IP.IsValid() || e.Proto != 0 || e.IP2.IsValid() || e.Net.IsValid() {
			return d.bad(&e, "only a port belongs in it")
		} else if e.Port < d.PortFrom || e.Port > d.PortTo {
			return d.bad(&e, fmt.Sprintf("port outside %d-%d", d.PortFrom, d.PortTo))
		}
	default:
		return d.bad(&e, "unknown set type")
	}
	if (e.Mark != 0) != d.SkbInfo {
		return d.bad(&e, "a mark belongs in every entry of a skbinfo set and in no other")
	}
	return nil
}

// bad is Check's error for e. e is passed by pointer and copied only here, so that a valid
// entry is never moved to the heap.
func (d SetDef) bad(e *Entry, why string) error {
	return fmt.Errorf("entry %s does not fit %s set %s: %s", *e, d.Type, d.Name, why)
}

func (d SetDef) checkAddr(e *Entry, a netip.Addr) error {
	switch {
	case !a.IsValid():
		return d.bad(e, "address missing")
	case a.Zone() != "" || a.Is4In6():
		return d.bad(e, "address must be plain IPv4 or IPv6")
	case FamilyOf(a) != d.Family:
		return d.bad(e, "address of the wrong family")
	}
	return nil
}

func (d SetDef) checkNetwork(e *Entry) error {
	switch {
	case !e.Net.IsValid():
		return d.bad(e, "network missing")
	case e.Net != e.Net.Masked():
		return d.bad(e, "network not masked")
	case e.Net.Bits() == 0:
		return d.bad(e, "a /0 network cannot be stored (the kernel takes /1 to /32 or /128)")
	}
	return d.checkAddr(e, e.Net.Addr())
}

// EntryLess orders entries by address, protocol, port, second address, network, mark.
func EntryLess(a, b Entry) bool {
	if c := a.IP.Compare(b.IP); c != 0 {
		return c < 0
	}
	if a.Proto != b.Proto {
		return a.Proto < b.Proto
	}
	if a.Port != b.Port {
		return a.Port < b.Port
	}
	if c := a.IP2.Compare(b.IP2); c != 0 {
		return c < 0
	}
	if c := a.Net.Addr().Compare(b.Net.Addr()); c != 0 {
		return c < 0
	}
	if a.Net.Bits() != b.Net.Bits() {
		return a.Net.Bits() < b.Net.Bits()
	}
	return a.Mark < b.Mark
}

package cleanup

import "strings"

// Kinds of objects a cleanup removes.
const (
	KindVirtualServer = "virtual-server"
	KindAddress       = "address"
	KindRoute         = "local-route" // a VIP's local route through the dummy link
	KindLink          = "link"
	KindRule          = "rule"
	KindChain         = "chain"
	KindSet           = "ipset"
)

// Owners: whose object it is.
const (
	OwnerKubeIPVS  = "kube-ipvs"
	OwnerKubeProxy = "kube-proxy"
)

// Object is one kernel object a cleanup removes (or, in a dry run, would remove).
type Object struct {
	Kind string `json:"kind"`
	// Name is the object itself: "TCP 10.96.0.10:53", "10.96.0.10/32", "kube-ipvs0",
	// "KIPVS-CLUSTER-IP", a chain's name, or a rule as iptables-save prints it after
	// "-A <chain> ".
	Name   string `json:"name"`
	Family string `json:"family,omitempty"` // ipv4 or ipv6 (absent: a port-only set, a link)
	// Backend, Table and Chain place a rule or chain: legacy or nft, the table, and the
	// chain a rule is in.
	Backend string `json:"backend,omitempty"`
	Table   string `json:"table,omitempty"`
	Chain   string `json:"chain,omitempty"`
	Link    string `json:"link,omitempty"` // the link an address or route is on
	Owner   string `json:"owner"`
	// Error says why the object could not be removed; empty when it was (or, in a dry
	// run, has not been tried).
	Error string `json:"error,omitempty"`
}

// String is the object on one line, as the command prints it: its kind, where it is and
// what it is.
func (o Object) String() string {
	parts := []string{o.Kind}
	if o.Backend != "" {
		parts = append(parts, o.tool(), o.Table)
	}
	if o.Chain != "" {
		parts = append(parts, "-A", o.Chain)
	}
	parts = append(parts, o.Name)
	if o.Link != "" {
		parts = append(parts, "on", o.Link)
	}
	return strings.Join(parts, " ") + " (" + o.Owner + ")"
}

// tool names the tool that lists a rule or chain: iptables-nft, ip6tables-legacy.
func (o Object) tool() string {
	if o.Family == familyIPv6 {
		return "ip6tables-" + o.Backend
	}
	return "iptables-" + o.Backend
}

const (
	familyIPv4 = "ipv4"
	familyIPv6 = "ipv6"
)

package iptproxy

import (
	"fmt"
	"net/netip"

	"github.com/kube-ipvs/kube-ipvs/iptables"
)

// DefaultMasqueradeMark is the packet-mark bit that asks KIPVS-POSTROUTING to masquerade.
const DefaultMasqueradeMark uint32 = 0x4000

// Config is what the rules depend on besides Services: proxy-wide settings only.
type Config struct {
	// IPv4 and IPv6 enable the families: iptables for IPv4, ip6tables for IPv6. A Config
	// with neither enables both (dual stack).
	IPv4, IPv6 bool
	// ClusterCIDRs (--cluster-cidr, any families) are the pod networks. Connections to a
	// ClusterIP from outside them are masqueraded so that replies come back through this
	// node; pods keep their address. Without any CIDR of a family (and without
	// MasqueradeAll) ClusterIP traffic of that family keeps its source address.
	ClusterCIDRs []netip.Prefix
	// MasqueradeAll (--masquerade-all) masquerades every connection to a ClusterIP.
	MasqueradeAll bool
	// MasqueradeMark is the single mark bit that asks for masquerade; 0 means
	// DefaultMasqueradeMark.
	MasqueradeMark uint32
	// Tools says how to run the iptables tools: the backend (legacy or nft; iptables.Auto
	// detects the one the node uses) and the xtables lock wait, as in the IPVS mode.
	Tools iptables.Config
}

// Validate reports a Config that cannot be rendered.
func (c Config) Validate() error {
	m := c.mark()
	if m&(m-1) != 0 {
		return fmt.Errorf("masquerade mark %#x must be a single bit", m)
	}
	for _, p := range c.ClusterCIDRs {
		if !p.IsValid() {
			return fmt.Errorf("cluster CIDR %v is not valid", p)
		}
	}
	return c.Tools.Validate()
}

func (c Config) mark() uint32 {
	if c.MasqueradeMark == 0 {
		return DefaultMasqueradeMark
	}
	return c.MasqueradeMark
}

func (c Config) families() []family {
	switch {
	case c.IPv4 && !c.IPv6:
		return []family{v4}
	case c.IPv6 && !c.IPv4:
		return []family{v6}
	}
	return []family{v4, v6}
}

// cidrs returns the cluster CIDRs of one family, masked, without duplicates.
func (c Config) cidrs(f family) []netip.Prefix {
	var out []netip.Prefix
	seen := map[netip.Prefix]bool{}
	for _, p := range c.ClusterCIDRs {
		p = iptables.UnmapPrefix(p)
		if familyOf(p.Addr()) != f || seen[p] {
			continue
		}
		seen[p] = true
		out = append(out, p)
	}
	return out
}

// family is an address family: IPv4 rules go through iptables, IPv6 ones through ip6tables.
type family = iptables.Family

const (
	v4 = iptables.V4
	v6 = iptables.V6
)

func familyOf(a netip.Addr) family { return iptables.FamilyOf(a) }

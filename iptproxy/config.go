package iptproxy

import (
	"net/netip"

	"github.com/kube-ipvs/kube-ipvs/firewall"
	"github.com/kube-ipvs/kube-ipvs/iptables"
)

// DefaultMasqueradeMark is the packet-mark bit that asks KIPVS-POSTROUTING to masquerade:
// the IPVS mode's, so that both modes leave the same bit to other users of the mark.
const DefaultMasqueradeMark = firewall.DefaultMasqueradeMark

// Config is what the rules depend on besides Services: proxy-wide settings only. The
// families and the masquerade settings are the IPVS mode's (firewall.Config) and mean the
// same: both modes masquerade the same connections, and one Validate checks them.
type Config struct {
	// IPv4 and IPv6 enable the families: iptables for IPv4, ip6tables for IPv6. A Config
	// with neither enables both (dual stack).
	IPv4, IPv6 bool
	// ClusterCIDRs (--cluster-cidr), MasqueradeAll (--masquerade-all) and MasqueradeMark
	// (0: DefaultMasqueradeMark) as in firewall.Config. In this mode a connection to a
	// ClusterIP from outside the cluster CIDRs is masqueraded, so that replies come back
	// through this node; pods keep their address. Without any CIDR of a family (and without
	// MasqueradeAll) ClusterIP traffic of that family keeps its source address.
	// LocalInterface, as in firewall.Config, tells pod traffic by the interface it arrives
	// on ("br0", or a prefix "veth+") instead of by ClusterCIDRs.
	ClusterCIDRs   []netip.Prefix
	LocalInterface string
	MasqueradeAll  bool
	MasqueradeMark uint32
	// Tools says how to run the iptables tools: the backend (legacy or nft; iptables.Auto
	// detects the one the node uses) and the xtables lock wait, as in the IPVS mode.
	Tools iptables.Config
}

// masquerade is the part of c that the IPVS mode's firewall.Config has too.
func (c Config) masquerade() firewall.Config {
	return firewall.Config{IPv4: c.IPv4, IPv6: c.IPv6, ClusterCIDRs: c.ClusterCIDRs, LocalInterface: c.LocalInterface,
		MasqueradeAll: c.MasqueradeAll, MasqueradeMark: c.MasqueradeMark}
}

// Validate reports a Config that cannot be rendered.
func (c Config) Validate() error {
	if err := c.masquerade().Validate(); err != nil {
		return err
	}
	return c.Tools.Validate()
}

func (c Config) mark() uint32 { return c.masquerade().Mark() }

// families are the families c enables, as the IPVS mode picks them.
func (c Config) families() []family {
	var out []family
	for _, f := range c.masquerade().Families() {
		if f == firewall.IPv6 {
			out = append(out, v6)
		} else {
			out = append(out, v4)
		}
	}
	return out
}

// localMatches are the iptables matches of traffic from this node's pods in family f: the
// input interface, or one "-s CIDR" per cluster CIDR of f (masked, without duplicates).
func (c Config) localMatches(f family) []string {
	if c.LocalInterface != "" {
		return []string{"-i " + c.LocalInterface}
	}
	var out []string
	for _, p := range prefixesOf(c.ClusterCIDRs, f) {
		out = append(out, "-s "+p.String())
	}
	return out
}

// prefixesOf returns the prefixes of one family, unmapped and masked, without duplicates.
func prefixesOf(all []netip.Prefix, f family) []netip.Prefix {
	var out []netip.Prefix
	seen := map[netip.Prefix]bool{}
	for _, p := range all {
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

package proxy

import (
	"net/netip"
	"slices"
)

// NodePortAddresses returns the node addresses that get a virtual server per NodePort,
// sorted, without duplicates, IPv4-mapped IPv6 addresses unmapped.
//
// With cidrs (--nodeport-addresses), it is every host address inside one of them: the
// operator chose, so loopback and link-local are kept if asked for. Without, it is every
// host address except loopback and link-local (169.254.0.0/16, fe80::/10), which are not
// reachable from other nodes.
//
// hostAddrs must not hold kube-ipvs0's addresses (dummyif.NodeAddresses skips that link):
// they are Service VIPs, and a NodePort on a ClusterIP would expose the Service on an
// address it was never meant to answer at. An address that is on kube-ipvs0 and on another interface is
// the node's own, and keeps its NodePorts.
func NodePortAddresses(cidrs []netip.Prefix, hostAddrs []netip.Addr) []netip.Addr {
	prefixes := make([]netip.Prefix, 0, len(cidrs))
	for _, p := range cidrs {
		if p.IsValid() {
			prefixes = append(prefixes, unmapPrefix(p))
		}
	}

	var out []netip.Addr
	for _, a := range hostAddrs {
		if !a.IsValid() {
			continue
		}
		a = a.WithZone("").Unmap()
		if a.IsUnspecified() {
			continue
		}
		if len(cidrs) > 0 {
			if !slices.ContainsFunc(prefixes, func(p netip.Prefix) bool { return p.Contains(a) }) {
				continue
			}
		} else if a.IsLoopback() || a.IsLinkLocalUnicast() {
			continue
		}
		out = append(out, a)
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out)
}

// unmapPrefix turns ::ffff:a.b.c.d/n (n >= 96) into a.b.c.d/(n-96), so it matches the
// unmapped host addresses; other prefixes are only masked.
func unmapPrefix(p netip.Prefix) netip.Prefix {
	if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
		return netip.PrefixFrom(a.Unmap(), p.Bits()-96).Masked()
	}
	return p.Masked()
}

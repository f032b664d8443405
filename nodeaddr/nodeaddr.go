// Package nodeaddr lists the node's own IP addresses, the candidates for NodePort virtual
// servers (package proxy filters them by --nodeport-addresses).
package nodeaddr

import (
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink"
)

// List returns every address configured on any interface of the current network namespace.
func List() ([]netip.Addr, error) {
	addrs, err := netlink.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		return nil, fmt.Errorf("listing addresses: %w", err)
	}
	out := make([]netip.Addr, 0, len(addrs))
	for _, a := range addrs {
		if ip, ok := netip.AddrFromSlice(a.IP); ok {
			out = append(out, ip.Unmap())
		}
	}
	return out, nil
}

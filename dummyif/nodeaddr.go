package dummyif

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink"
)

// NodeAddresses lists the node's own IP addresses, the candidates for NodePort virtual
// servers (package proxy filters them by --nodeport-addresses): every address configured on
// any interface of the current network namespace, except those on the link named skipLink
// (the dummy interface that holds Service VIPs: they are not node IPs, and a restarted proxy
// must not mistake them for node IPs before it has read the dummy interface).
func NodeAddresses(skipLink string) ([]netip.Addr, error) {
	skip := -1
	if skipLink != "" {
		l, err := netlink.LinkByName(skipLink)
		var notFound netlink.LinkNotFoundError
		switch {
		case err == nil:
			skip = l.Attrs().Index
		case !errors.As(err, &notFound):
			return nil, fmt.Errorf("looking up %s: %w", skipLink, err)
		}
	}
	// An address added or removed anywhere on the node while the kernel answers marks the
	// dump interrupted: its result may be incomplete, so it is listed again, never used.
	var addrs []netlink.Addr
	var err error
	for range 5 {
		if addrs, err = netlink.AddrList(nil, netlink.FAMILY_ALL); !errors.Is(err, netlink.ErrDumpInterrupted) {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("listing addresses: %w", err)
	}
	out := make([]netip.Addr, 0, len(addrs))
	for _, a := range addrs {
		if a.LinkIndex == skip {
			continue
		}
		if ip, ok := netip.AddrFromSlice(a.IP); ok {
			out = append(out, ip.Unmap())
		}
	}
	return out, nil
}

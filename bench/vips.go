package bench

import (
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/kube-ipvs/kube-ipvs/dummyif"
)

// boundVIPs counts the VIPs bound through the link as the binding binds them: its addresses,
// or the proxy's local routes through it (protocol dummyif.RouteProtocol, local table).
func boundVIPs(l netlink.Link, b dummyif.Binding) (int, error) {
	if b != dummyif.BindRoute {
		addrs, err := netlink.AddrList(l, netlink.FAMILY_ALL)
		return len(addrs), err
	}
	filter := &netlink.Route{LinkIndex: l.Attrs().Index, Table: unix.RT_TABLE_LOCAL, Protocol: dummyif.RouteProtocol}
	routes, err := netlink.RouteListFiltered(netlink.FAMILY_ALL, filter,
		netlink.RT_FILTER_OIF|netlink.RT_FILTER_TABLE|netlink.RT_FILTER_PROTOCOL)
	return len(routes), err
}

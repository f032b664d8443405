package dummyif

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// RouteProtocol is the rtm_protocol of the proxy's local routes: a number no routing daemon
// or kernel part uses (see /etc/iproute2/rt_protos), so a route with it is the proxy's and
// every other route, on kube-ipvs0 or elsewhere, is never listed or removed.
const RouteProtocol = 75

// RouteMetric is the priority of the proxy's local routes. It is neither 0, the metric of
// the local route the kernel adds for an address, nor 1024, the IPv6 default of `ip route
// add`: IPv6 refuses a second route to a prefix through the same link at the same metric,
// and IPv4 one of the same priority, so a VIP's route and its address (while the binding
// is converted) or a foreign local route can be there at once.
const RouteMetric = 75

// Routes is the part of Netlink that binds VIPs as local routes (BindRoute).
type Routes interface {
	// LinkSetUp sets the link up.
	LinkSetUp(linkIndex int) error
	// LocalRouteList lists the prefixes of the proxy's routes through the link: type
	// local, in the local table, with RouteProtocol, both families. It fails, with an
	// error wrapping ErrDumpInterrupted, rather than return a listing the kernel marked
	// inconsistent.
	LocalRouteList(linkIndex int) ([]netip.Prefix, error)
	// LocalRouteAdd adds the proxy's local route; an error wrapping ErrAddrExists when it
	// is there.
	LocalRouteAdd(linkIndex int, p netip.Prefix) error
	// LocalRouteDel removes the proxy's local route; an error wrapping ErrAddrNotFound
	// when it is not there. A route with another protocol or metric is never matched.
	LocalRouteDel(linkIndex int, p netip.Prefix) error
}

func (k kernelNetlink) LinkSetUp(linkIndex int) error {
	if err := k.h.LinkSetUp(&netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Index: linkIndex}}); err != nil {
		return fmt.Errorf("set link %d up: %w", linkIndex, err)
	}
	return nil
}

// localRoute is the proxy's local route to p through the link (p nil: the filter of a
// listing).
func localRoute(linkIndex int, p *netip.Prefix) *netlink.Route {
	r := &netlink.Route{
		LinkIndex: linkIndex,
		Table:     unix.RT_TABLE_LOCAL,
		Type:      unix.RTN_LOCAL,
		Scope:     netlink.SCOPE_HOST,
		Protocol:  RouteProtocol,
		Priority:  RouteMetric,
	}
	if p != nil {
		r.Dst = &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
	}
	return r
}

func (k kernelNetlink) LocalRouteList(linkIndex int) ([]netip.Prefix, error) {
	var out []netip.Prefix
	mask := uint64(netlink.RT_FILTER_TABLE | netlink.RT_FILTER_OIF | netlink.RT_FILTER_PROTOCOL | netlink.RT_FILTER_TYPE)
	err := k.h.RouteListFilteredIter(netlink.FAMILY_ALL, localRoute(linkIndex, nil), mask, func(r netlink.Route) bool {
		if r.Dst == nil {
			return true
		}
		ip, ok := netip.AddrFromSlice(r.Dst.IP)
		if ok {
			bits, _ := r.Dst.Mask.Size()
			out = append(out, netip.PrefixFrom(ip.Unmap(), bits))
		}
		return true
	})
	if errors.Is(err, netlink.ErrDumpInterrupted) {
		return nil, fmt.Errorf("list local routes of link %d: %w", linkIndex, ErrDumpInterrupted)
	}
	if err != nil {
		return nil, fmt.Errorf("list local routes of link %d: %w", linkIndex, err)
	}
	return out, nil
}

func (k kernelNetlink) LocalRouteAdd(linkIndex int, p netip.Prefix) error {
	return routeWriteErr(k.h.RouteAdd(localRoute(linkIndex, &p)), unix.EEXIST, ErrAddrExists, "add", p, linkIndex)
}

func (k kernelNetlink) LocalRouteDel(linkIndex int, p netip.Prefix) error {
	return routeWriteErr(k.h.RouteDel(localRoute(linkIndex, &p)), unix.ESRCH, ErrAddrNotFound, "remove", p, linkIndex)
}

// routeWriteErr names a failed route write; errno, the kernel's way of saying that the
// route already was as asked, becomes the package's sentinel for it.
func routeWriteErr(err error, errno unix.Errno, sentinel error, verb string, p netip.Prefix, linkIndex int) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, errno) {
		err = sentinel
	}
	return fmt.Errorf("%s local route %s through link %d: %w", verb, p, linkIndex, err)
}

// Package conntrack deletes connection-tracking entries through netlink (never by running the
// conntrack binary), for UDP virtual servers whose real servers change: UDP has no connection
// to end, so without this a client keeps sending to a backend that is gone.
package conntrack

import (
	"fmt"
	"net"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/kube-ipvs/kube-ipvs/model"
)

// Cleaner deletes entries in the current network namespace.
type Cleaner struct{}

func family(vs model.VSKey) netlink.InetFamily {
	if vs.Addr.Is6() {
		return unix.AF_INET6
	}
	return unix.AF_INET
}

func baseFilter(vs model.VSKey) (*netlink.ConntrackFilter, error) {
	f := &netlink.ConntrackFilter{}
	if err := f.AddProtocol(uint8(vs.Proto)); err != nil {
		return nil, err
	}
	if err := f.AddIP(netlink.ConntrackOrigDstIP, net.IP(vs.Addr.AsSlice())); err != nil {
		return nil, err
	}
	if err := f.AddPort(netlink.ConntrackOrigDstPort, vs.Port); err != nil {
		return nil, err
	}
	return f, nil
}

// ClearRealServer deletes the entries of flows to the virtual server that were sent to rs
// (their reply comes from rs). It returns how many were deleted.
func (Cleaner) ClearRealServer(vs model.VSKey, rs model.RSKey) (uint, error) {
	f, err := baseFilter(vs)
	if err != nil {
		return 0, err
	}
	if err := f.AddIP(netlink.ConntrackReplySrcIP, net.IP(rs.Addr.AsSlice())); err != nil {
		return 0, err
	}
	n, err := netlink.ConntrackDeleteFilters(netlink.ConntrackTable, family(vs), f)
	if err != nil {
		return n, fmt.Errorf("deleting conntrack entries of %s via %s: %w", vs, rs, err)
	}
	return n, nil
}

// ClearVirtualServer deletes every entry of flows to the virtual server: used when a UDP
// Service gets its first endpoint, so flows recorded while it had none start afresh.
func (Cleaner) ClearVirtualServer(vs model.VSKey) (uint, error) {
	f, err := baseFilter(vs)
	if err != nil {
		return 0, err
	}
	n, err := netlink.ConntrackDeleteFilters(netlink.ConntrackTable, family(vs), f)
	if err != nil {
		return n, fmt.Errorf("deleting conntrack entries of %s: %w", vs, err)
	}
	return n, nil
}

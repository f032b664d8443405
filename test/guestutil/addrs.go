package guestutil

import (
	"errors"
	"testing"

	"github.com/vishvananda/netlink"
)

// AddrList lists a link's addresses of every family. The kernel marks a dump that changed
// while it was read (any address anywhere, such as an IPv6 link-local one appearing) and
// netlink returns ErrDumpInterrupted: such a listing is read again, as the product does,
// and a test fails only if the kernel keeps refusing a clean one.
func AddrList(t testing.TB, link netlink.Link) []netlink.Addr {
	t.Helper()
	list, err := netlink.AddrList(link, netlink.FAMILY_ALL)
	for try := 0; errors.Is(err, netlink.ErrDumpInterrupted) && try < 10; try++ {
		list, err = netlink.AddrList(link, netlink.FAMILY_ALL)
	}
	if err != nil {
		t.Fatalf("listing the addresses of %s: %v", link.Attrs().Name, err)
	}
	return list
}

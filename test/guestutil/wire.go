package guestutil

import (
	"net/netip"
	"os/exec"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// NewNamespace creates a network namespace with loopback up, without entering it; it is
// closed when the test ends (and goes away once no process runs in it).
func NewNamespace(t testing.TB) netns.NsHandle {
	t.Helper()
	ns, err := newNamespace()
	if err != nil {
		t.Fatalf("new network namespace: %v", err)
	}
	t.Cleanup(func() { ns.Close() })
	RunIn(t, ns, "ip", "link", "set", "lo", "up")
	return ns
}

// RunIn runs a tool inside ns and returns its combined output; it fails the test if the
// tool fails. The child is forked from a thread switched into ns, so it starts there.
func RunIn(t testing.TB, ns netns.NsHandle, name string, args ...string) string {
	t.Helper()
	var out []byte
	err := InNamespace(ns, func() (err error) {
		out, err = exec.Command(name, args...).CombinedOutput()
		return err
	})
	if err != nil {
		t.Fatalf("%s %s (in namespace %s): %v\n%s", name, strings.Join(args, " "), ns, err, out)
	}
	return string(out)
}

// Wire joins ns to the current namespace with a veth pair: the current namespace's end is
// named outer and gets outerAddr, the end in ns is named eth0 and gets inner; both are
// prefixes on one subnet. ns routes everything else through outerAddr, as a host behind a
// router does.
func Wire(t testing.TB, ns netns.NsHandle, outer string, outerAddr, inner netip.Prefix) {
	t.Helper()
	const peer = "wire-peer"
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: outer}, PeerName: peer}); err != nil {
		t.Fatalf("veth %s: %v", outer, err)
	}
	t.Cleanup(func() {
		if l, err := netlink.LinkByName(outer); err == nil {
			_ = netlink.LinkDel(l)
		}
	})
	p, err := netlink.LinkByName(peer)
	if err != nil {
		t.Fatalf("veth peer of %s: %v", outer, err)
	}
	must(t, outer, "move peer", netlink.LinkSetNsFd(p, int(ns)))
	o, err := netlink.LinkByName(outer)
	if err != nil {
		t.Fatalf("veth %s: %v", outer, err)
	}
	must(t, outer, "address", netlink.AddrAdd(o, hostAddr(outerAddr.Addr(), outerAddr.Bits())))
	must(t, outer, "up", netlink.LinkSetUp(o))

	h, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		t.Fatalf("netlink handle for %s: %v", outer, err)
	}
	defer h.Close()
	in, err := h.LinkByName(peer)
	if err != nil {
		t.Fatalf("veth peer of %s: %v", outer, err)
	}
	must(t, outer, "rename peer", h.LinkSetName(in, "eth0"))
	must(t, outer, "peer address", h.AddrAdd(in, hostAddr(inner.Addr(), inner.Bits())))
	must(t, outer, "peer up", h.LinkSetUp(in))
	must(t, outer, "default route", h.RouteAdd(&netlink.Route{LinkIndex: in.Attrs().Index, Gw: outerAddr.Addr().AsSlice()}))
}

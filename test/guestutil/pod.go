package guestutil

import (
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// gatewayV4 and gatewayV6 are the addresses every pod routes through. Each host-side veth
// carries them, as Calico does, so pods need no shared bridge and the node routes each pod's
// /32 (/128) to its own veth.
var (
	gatewayV4 = netip.MustParseAddr("169.254.1.1")
	gatewayV6 = netip.MustParseAddr("fe80::1")
)

// Pod is a network namespace joined to the current (node) namespace by a veth pair, with
// routed addresses: a stand-in for a Kubernetes pod on this node.
type Pod struct {
	Name     string
	NS       netns.NsHandle
	Addrs    []netip.Addr
	HostVeth string
}

// NewPod creates a pod with the given addresses (IPv4 and/or IPv6). It is removed when the
// test ends. Names must be short: the host veth is "v" + name (15 bytes at most).
func NewPod(t testing.TB, name string, addrs ...netip.Addr) *Pod {
	t.Helper()
	p := &Pod{Name: name, Addrs: addrs, HostVeth: "v" + name}
	ns, err := newNamespace()
	if err != nil {
		t.Fatalf("pod %s: new network namespace: %v", name, err)
	}
	p.NS = ns
	t.Cleanup(func() { ns.Close() })

	peerName := "p" + name
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: p.HostVeth}, PeerName: peerName}
	if err := netlink.LinkAdd(veth); err != nil {
		t.Fatalf("pod %s: add veth: %v", name, err)
	}
	t.Cleanup(func() {
		if l, err := netlink.LinkByName(p.HostVeth); err == nil {
			_ = netlink.LinkDel(l)
		}
	})
	peer, err := netlink.LinkByName(peerName)
	if err != nil {
		t.Fatalf("pod %s: find veth peer: %v", name, err)
	}
	if err := netlink.LinkSetNsFd(peer, int(ns)); err != nil {
		t.Fatalf("pod %s: move veth peer into the pod: %v", name, err)
	}

	// Node side: the gateway addresses, and a route to each pod address through this veth.
	host, err := netlink.LinkByName(p.HostVeth)
	if err != nil {
		t.Fatalf("pod %s: %v", name, err)
	}
	must(t, name, "add gateway v4", netlink.AddrAdd(host, hostAddr(gatewayV4, 32)))
	must(t, name, "add gateway v6", netlink.AddrAdd(host, hostAddr(gatewayV6, 64)))
	must(t, name, "host veth up", netlink.LinkSetUp(host))
	for _, a := range addrs {
		must(t, name, "route to "+a.String(), netlink.RouteAdd(&netlink.Route{
			LinkIndex: host.Attrs().Index, Dst: prefixNet(netip.PrefixFrom(a, a.BitLen())), Scope: netlink.SCOPE_LINK,
		}))
	}

	// Pod side, through a handle bound to the pod's namespace.
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		t.Fatalf("pod %s: netlink handle: %v", name, err)
	}
	defer h.Close()
	eth, err := h.LinkByName(peerName)
	if err != nil {
		t.Fatalf("pod %s: %v", name, err)
	}
	must(t, name, "rename eth0", h.LinkSetName(eth, "eth0"))
	lo, err := h.LinkByName("lo")
	if err != nil {
		t.Fatalf("pod %s: %v", name, err)
	}
	must(t, name, "lo up", h.LinkSetUp(lo))
	must(t, name, "eth0 up", h.LinkSetUp(eth))
	for _, a := range addrs {
		must(t, name, "address "+a.String(), h.AddrAdd(eth, hostAddr(a, a.BitLen())))
	}
	idx := eth.Attrs().Index
	must(t, name, "link route to gateway", h.RouteAdd(&netlink.Route{
		LinkIndex: idx, Dst: prefixNet(netip.PrefixFrom(gatewayV4, 32)), Scope: netlink.SCOPE_LINK}))
	must(t, name, "default route v4", h.RouteAdd(&netlink.Route{LinkIndex: idx, Gw: gatewayV4.AsSlice()}))
	for _, a := range addrs {
		if a.Is6() {
			must(t, name, "default route v6", h.RouteAdd(&netlink.Route{LinkIndex: idx, Gw: gatewayV6.AsSlice()}))
			break
		}
	}
	return p
}

// IP returns the pod's first address of the given family (4 or 6).
func (p *Pod) IP(family int) netip.Addr {
	for _, a := range p.Addrs {
		if (family == 4) == a.Is4() {
			return a
		}
	}
	panic(fmt.Sprintf("pod %s has no IPv%d address", p.Name, family))
}

// Do runs fn with the calling goroutine's thread inside the pod's namespace. Sockets created
// in fn stay in the pod's namespace after Do returns.
func (p *Pod) Do(fn func() error) error {
	return InNamespace(p.NS, fn)
}

// InNamespace runs fn on a thread switched into ns and switches it back afterwards.
func InNamespace(ns netns.NsHandle, fn func() error) error {
	runtime.LockOSThread()
	origin, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer origin.Close()
	if err := netns.Set(ns); err != nil {
		runtime.UnlockOSThread()
		return err
	}
	ferr := fn()
	if err := netns.Set(origin); err != nil {
		// The thread is stuck in the wrong namespace: keep it locked so the runtime ends it.
		return fmt.Errorf("returning to the original namespace: %w", err)
	}
	runtime.UnlockOSThread()
	return ferr
}

// newNamespace creates a network namespace without leaving the calling thread in it.
func newNamespace() (netns.NsHandle, error) {
	runtime.LockOSThread()
	origin, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return 0, err
	}
	defer origin.Close()
	ns, err := netns.New() // also switches this thread into the new namespace
	if err != nil {
		// netns.New fails before switching, so the thread is still at home.
		runtime.UnlockOSThread()
		return 0, err
	}
	if err := netns.Set(origin); err != nil {
		// The thread is stuck in the new namespace: keep it locked so the runtime ends it.
		ns.Close()
		return 0, err
	}
	runtime.UnlockOSThread()
	return ns, nil
}

func hostAddr(a netip.Addr, bits int) *netlink.Addr {
	addr := &netlink.Addr{IPNet: prefixNet(netip.PrefixFrom(a, bits))}
	if a.Is6() {
		// No duplicate address detection: the address is usable at once, not after ~1 s.
		addr.Flags = unix.IFA_F_NODAD
	}
	return addr
}

func prefixNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

func must(t testing.TB, pod, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("pod %s: %s: %v", pod, what, err)
	}
}

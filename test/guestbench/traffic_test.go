//go:build guest

package guestbench

import (
	"net"
	"net/netip"
	"syscall"
	"testing"

	"github.com/moby/ipvs"
	"github.com/vishvananda/netlink"

	"github.com/kube-ipvs/kube-ipvs/test/guestutil"
)

// A client pod reaches two server pods through an IPVS virtual server in NAT mode: the VIP is
// bound to kube-ipvs0, exactly as the proxy will do it. Every answer must come from a real
// server, and round robin must alternate between them.
func TestTrafficThroughIPVSVirtualServer(t *testing.T) {
	guestutil.RequireGuest(t)
	guestutil.WriteSysctl(t, "net.ipv4.ip_forward", "1")

	server1 := guestutil.NewPod(t, "srv1", netip.MustParseAddr("10.244.1.10"))
	server2 := guestutil.NewPod(t, "srv2", netip.MustParseAddr("10.244.1.11"))
	client := guestutil.NewPod(t, "cli", netip.MustParseAddr("10.244.2.10"))
	ns1 := server1.ServeTCP(t, 8080, "srv1")
	ns2 := server2.ServeTCP(t, 8080, "srv2")

	vip := netip.MustParseAddr("10.96.0.10")
	if err := netlink.LinkAdd(&netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Name: "kube-ipvs0"}}); err != nil {
		t.Fatalf("create kube-ipvs0: %v", err)
	}
	dummy, err := netlink.LinkByName("kube-ipvs0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { netlink.LinkDel(dummy) })
	if err := netlink.AddrAdd(dummy, &netlink.Addr{IPNet: &net.IPNet{IP: vip.AsSlice(), Mask: net.CIDRMask(32, 32)}}); err != nil {
		t.Fatalf("bind VIP: %v", err)
	}

	h, err := ipvs.New("")
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	svc := &ipvs.Service{AddressFamily: syscall.AF_INET, Protocol: syscall.IPPROTO_TCP,
		Address: vip.AsSlice(), Port: 80, SchedName: "rr", Netmask: 0xffffffff}
	if err := h.NewService(svc); err != nil {
		t.Fatalf("create virtual server: %v", err)
	}
	t.Cleanup(func() { h.DelService(svc) })
	for _, p := range []*guestutil.Pod{server1, server2} {
		d := &ipvs.Destination{AddressFamily: syscall.AF_INET, Address: p.IP(4).AsSlice(), Port: 8080,
			Weight: 1, ConnectionFlags: ipvs.ConnectionFlagMasq}
		if err := h.NewDestination(svc, d); err != nil {
			t.Fatalf("add real server %s: %v", p.IP(4), err)
		}
	}

	target := netip.AddrPortFrom(vip, 80)
	got := map[string]int{}
	var order []string
	for i := 0; i < 6; i++ {
		name, err := client.AskTCP(target)
		if err != nil {
			t.Fatalf("request %d from the client pod to %s: %v", i, target, err)
		}
		got[name]++
		order = append(order, name)
	}
	if got["srv1"] != 3 || got["srv2"] != 3 {
		t.Errorf("round robin over 2 servers answered %v (order %v), want 3 each", got, order)
	}
	for i := 1; i < len(order); i++ {
		if order[i] == order[i-1] {
			t.Errorf("round robin answered %s twice in a row: %v", order[i], order)
		}
	}
	// The servers' own counters agree: the answers really came from them.
	if ns1.Served() != 3 || ns2.Served() != 3 {
		t.Errorf("servers counted %d and %d connections, want 3 each", ns1.Served(), ns2.Served())
	}

	// The node itself reaches the VIP too (IPVS on the local output path).
	name, err := guestutil.AskTCP(target)
	if err != nil {
		t.Fatalf("request from the node to %s: %v", target, err)
	}
	if name != "srv1" && name != "srv2" {
		t.Errorf("node request answered by %q", name)
	}
}

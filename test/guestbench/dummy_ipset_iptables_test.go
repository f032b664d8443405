//go:build guest

package guestbench

import (
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/kube-ipvs/kube-ipvs/test/guestutil"
	"github.com/kube-ipvs/kube-ipvs/test/netnstest"
)

func TestDummyInterfaceBindAndUnbind(t *testing.T) {
	guestutil.RequireGuest(t)
	if err := netlink.LinkAdd(&netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Name: "kube-ipvs0"}}); err != nil {
		t.Fatalf("create kube-ipvs0: %v", err)
	}
	link, err := netlink.LinkByName("kube-ipvs0")
	if err != nil {
		t.Fatal(err)
	}
	defer netlink.LinkDel(link)
	if link.Type() != "dummy" {
		t.Fatalf("kube-ipvs0 has type %q, want dummy", link.Type())
	}

	v4 := &netlink.Addr{IPNet: &net.IPNet{IP: net.ParseIP("10.96.0.1"), Mask: net.CIDRMask(32, 32)}}
	v6 := &netlink.Addr{IPNet: &net.IPNet{IP: net.ParseIP("fd00:10:96::1"), Mask: net.CIDRMask(128, 128)}, Flags: unix.IFA_F_NODAD}
	for _, a := range []*netlink.Addr{v4, v6} {
		if err := netlink.AddrAdd(link, a); err != nil {
			t.Fatalf("bind %s: %v", a.IPNet, err)
		}
	}
	if got := addrs(t, link); !got[v4.IPNet.String()] || !got[v6.IPNet.String()] {
		t.Fatalf("after binding, kube-ipvs0 has %v", got)
	}
	if err := netlink.AddrDel(link, v4); err != nil {
		t.Fatalf("unbind %s: %v", v4.IPNet, err)
	}
	if got := addrs(t, link); got[v4.IPNet.String()] || !got[v6.IPNet.String()] {
		t.Fatalf("after unbinding %s, kube-ipvs0 has %v", v4.IPNet, got)
	}
	// The tool users know shows the same.
	if out := netnstest.Run(t, "ip", "-6", "addr", "show", "dev", "kube-ipvs0"); !strings.Contains(out, "fd00:10:96::1/128") {
		t.Errorf("ip addr does not show the IPv6 VIP:\n%s", out)
	}
}

func addrs(t *testing.T, link netlink.Link) map[string]bool {
	t.Helper()
	list := guestutil.AddrList(t, link)
	m := map[string]bool{}
	for _, a := range list {
		m[a.IPNet.String()] = true
	}
	return m
}

func TestIpsetCreateFillList(t *testing.T) {
	guestutil.RequireGuest(t)
	const set = "KIPVS-BENCH-TEST"
	if err := netlink.IpsetCreate(set, "hash:ip,port", netlink.IpsetCreateOptions{Family: unix.AF_INET}); err != nil {
		t.Fatalf("create set: %v", err)
	}
	defer netlink.IpsetDestroy(set)
	tcp, udp := uint8(unix.IPPROTO_TCP), uint8(unix.IPPROTO_UDP)
	p80, p53 := uint16(80), uint16(53)
	entries := []*netlink.IPSetEntry{
		{IP: net.ParseIP("10.96.0.1").To4(), Protocol: &tcp, Port: &p80},
		{IP: net.ParseIP("10.96.0.10").To4(), Protocol: &udp, Port: &p53},
	}
	for _, e := range entries {
		if err := netlink.IpsetAdd(set, e); err != nil {
			t.Fatalf("add %s: %v", e.IP, err)
		}
	}
	res, err := netlink.IpsetList(set)
	if err != nil {
		t.Fatalf("list set: %v", err)
	}
	if res.TypeName != "hash:ip,port" || len(res.Entries) != 2 {
		t.Fatalf("set is %s with %d entries, want hash:ip,port with 2", res.TypeName, len(res.Entries))
	}
	found := map[string]bool{}
	for _, e := range res.Entries {
		found[e.IP.String()+","+protoName(*e.Protocol)+":"+strconv.Itoa(int(*e.Port))] = true
	}
	for _, want := range []string{"10.96.0.1,tcp:80", "10.96.0.10,udp:53"} {
		if !found[want] {
			t.Errorf("netlink listing lacks %s: %v", want, found)
		}
	}
	out := netnstest.Run(t, "ipset", "list", set)
	for _, want := range []string{"10.96.0.1,tcp:80", "10.96.0.10,udp:53"} {
		if !strings.Contains(out, want) {
			t.Errorf("ipset list lacks %s:\n%s", want, out)
		}
	}
}

func protoName(p uint8) string {
	switch p {
	case unix.IPPROTO_TCP:
		return "tcp"
	case unix.IPPROTO_UDP:
		return "udp"
	}
	return strconv.Itoa(int(p))
}

// Both iptables backends take a --noflush restore of a private chain and show it back.
func TestIptablesRestoreBothBackends(t *testing.T) {
	guestutil.RequireGuest(t)
	for _, backend := range []string{"legacy", "nft"} {
		t.Run(backend, func(t *testing.T) {
			rules := "*nat\n:KIPVS-BENCH - [0:0]\n-A KIPVS-BENCH -p tcp -d 10.96.0.1 --dport 80 -m comment --comment bench -j RETURN\nCOMMIT\n"
			netnstest.RunStdin(t, rules, "iptables-"+backend+"-restore", "--noflush")
			out := netnstest.Run(t, "iptables-"+backend+"-save", "-t", "nat")
			if !strings.Contains(out, "-A KIPVS-BENCH -d 10.96.0.1/32 -p tcp -m tcp --dport 80 -m comment --comment bench -j RETURN") {
				t.Errorf("iptables-%s-save does not show the restored rule:\n%s", backend, out)
			}
			netnstest.Run(t, "iptables-"+backend, "-t", "nat", "-F", "KIPVS-BENCH")
			netnstest.Run(t, "iptables-"+backend, "-t", "nat", "-X", "KIPVS-BENCH")
		})
	}
}

//go:build guest

package dummyif

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/kube-ipvs/kube-ipvs/test/echoserver"
	"github.com/kube-ipvs/kube-ipvs/test/guestutil"
)

// fresh requires that no link has the name yet and deletes whatever link has it when the
// test ends.
func fresh(t *testing.T, link string) {
	t.Helper()
	guestutil.RequireGuest(t)
	if _, err := netlink.LinkByName(link); err == nil {
		t.Fatalf("link %s exists before the test", link)
	}
	t.Cleanup(func() {
		if l, err := netlink.LinkByName(link); err == nil {
			_ = netlink.LinkDel(l)
		}
	})
}

func nlLink(t *testing.T, link string) netlink.Link {
	t.Helper()
	l, err := netlink.LinkByName(link)
	if err != nil {
		t.Fatalf("link %s: %v", link, err)
	}
	return l
}

// addrsOf lists a link's addresses as "prefix" plus " nodad"/" tentative" when so flagged,
// sorted, leaving out IPv6 link-local ones.
func addrsOf(t *testing.T, link string) []string {
	t.Helper()
	list := guestutil.AddrList(t, nlLink(t, link))
	out := []string{}
	for _, a := range list {
		if a.IP.IsLinkLocalUnicast() {
			continue
		}
		s := a.IPNet.String()
		if a.Flags&unix.IFA_F_NODAD != 0 {
			s += " nodad"
		}
		if a.Flags&unix.IFA_F_TENTATIVE != 0 {
			s += " tentative"
		}
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

func expectLinkAddrs(t *testing.T, link string, want ...string) {
	t.Helper()
	if want == nil {
		want = []string{}
	}
	sort.Strings(want)
	if got := addrsOf(t, link); !reflect.DeepEqual(got, want) {
		t.Errorf("addresses of %s:\n  %v\nwant\n  %v", link, got, want)
	}
}

// addAddr adds an address directly, as someone else would.
func addAddr(t *testing.T, link string, prefix string, flags int) {
	t.Helper()
	p := netip.MustParsePrefix(prefix)
	if err := netlink.AddrAdd(nlLink(t, link), nlAddr(p, flags)); err != nil {
		t.Fatalf("add %s to %s: %v", prefix, link, err)
	}
}

func addVeth(t *testing.T, link, peer string) {
	t.Helper()
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: link}, PeerName: peer}); err != nil {
		t.Fatalf("create veth %s: %v", link, err)
	}
	t.Cleanup(func() {
		if l, err := netlink.LinkByName(link); err == nil {
			_ = netlink.LinkDel(l)
		}
	})
}

func addrs(s ...string) []netip.Addr {
	out := make([]netip.Addr, len(s))
	for i, a := range s {
		out[i] = netip.MustParseAddr(a)
	}
	return out
}

func TestGuestEnsureLinkCreatesADownDummyOnce(t *testing.T) {
	fresh(t, name)
	r := New(name)
	if err := r.EnsureLink(); err != nil {
		t.Fatalf("EnsureLink: %v", err)
	}
	l := nlLink(t, name)
	if l.Type() != "dummy" || l.Attrs().Flags&net.FlagUp != 0 {
		t.Errorf("%s is a %s link with flags %v, want a dummy that is down", name, l.Type(), l.Attrs().Flags)
	}
	if err := r.EnsureLink(); err != nil {
		t.Fatalf("second EnsureLink: %v", err)
	}
	if r.Writes() != 1 {
		t.Errorf("two EnsureLinks wrote %d times, want 1", r.Writes())
	}
	if again := nlLink(t, name); again.Attrs().Index != l.Attrs().Index {
		t.Error("the link was re-created")
	}
	// A restarted proxy adopts it without a write.
	r2 := New(name)
	if err := r2.EnsureLink(); err != nil {
		t.Fatal(err)
	}
	expectClean(t, resync(r2, nil), 0)
	if r2.Writes() != 0 {
		t.Errorf("adopting the link wrote %d times", r2.Writes())
	}
}

func TestGuestRefusesAVethOfThatName(t *testing.T) {
	fresh(t, name)
	addVeth(t, name, "kipvs-peer")
	addAddr(t, name, "10.96.50.1/32", 0)
	r := New(name)
	if err := r.EnsureLink(); !errors.Is(err, ErrNotDummy) {
		t.Fatalf("EnsureLink over a veth: %v, want ErrNotDummy", err)
	}
	if res := resync(r, map[netip.Addr]bool{netip.MustParseAddr("10.96.50.2"): true}); !errors.Is(res.Err, ErrNotDummy) {
		t.Errorf("repair over a veth: %+v", res)
	}
	if res := r.Apply(addrs("10.96.50.3"), addrs("10.96.50.1")); !errors.Is(res.Err, ErrNotDummy) {
		t.Errorf("Apply over a veth: %+v", res)
	}
	if r.Writes() != 0 {
		t.Errorf("%d writes", r.Writes())
	}
	if l := nlLink(t, name); l.Type() != "veth" {
		t.Errorf("the link is now a %s", l.Type())
	}
	expectLinkAddrs(t, name, "10.96.50.1/32")
}

func TestGuestBindAndUnbind(t *testing.T) {
	fresh(t, name)
	r := New(name)
	if err := r.EnsureLink(); err != nil {
		t.Fatal(err)
	}
	expectClean(t, r.Apply(addrs("10.96.51.1", "fd00:96:51::1"), nil), 2)
	expectLinkAddrs(t, name, "10.96.51.1/32", "fd00:96:51::1/128 nodad")
	out, _ := exec.Command("ip", "addr", "show", "dev", name).CombinedOutput()
	t.Logf("ip addr show dev %s:\n%s", name, out)

	expectClean(t, r.Apply(addrs("10.96.51.1", "fd00:96:51::1"), addrs("10.96.51.2")), 0)
	expectClean(t, r.Apply(addrs("10.96.51.2"), addrs("10.96.51.1")), 2)
	expectLinkAddrs(t, name, "10.96.51.2/32", "fd00:96:51::1/128 nodad")
	expectClean(t, r.Apply(nil, addrs("fd00:96:51::1", "10.96.51.2")), 2)
	expectLinkAddrs(t, name)
	if r.Writes() != 7 {
		t.Errorf("Writes() = %d, want 7", r.Writes())
	}
}

func TestGuestResyncTouchesOnlyThisLink(t *testing.T) {
	fresh(t, name)
	r := New(name)
	if err := r.EnsureLink(); err != nil {
		t.Fatal(err)
	}
	// Someone else's state: on kube-ipvs0 an extra address, a desired one under the wrong
	// prefix, a desired IPv6 one without NODAD and an extra IPv6 one. The same extra
	// addresses sit on lo and on a veth too.
	addAddr(t, name, "10.96.52.9/32", 0)
	addAddr(t, name, "10.96.52.2/24", 0)
	addAddr(t, name, "fd00:96:52::1/128", 0)
	addAddr(t, name, "fd00:96:52::9/128", unix.IFA_F_NODAD)
	addAddr(t, "lo", "10.96.52.9/32", 0)
	t.Cleanup(func() { _ = netlink.AddrDel(nlLink(t, "lo"), nlAddr(netip.MustParsePrefix("10.96.52.9/32"), 0)) })
	addVeth(t, "kt-other", "kt-otherp")
	addAddr(t, "kt-other", "10.96.52.9/32", 0)
	addAddr(t, "kt-other", "fd00:96:52::9/128", unix.IFA_F_NODAD)
	// A dummy link is NOARP, so the kernel skips DAD even without NODAD: that address is not
	// tentative, it is usable, and the reconciler keeps it as it is.
	expectLinkAddrs(t, name, "10.96.52.9/32", "10.96.52.2/24", "fd00:96:52::1/128", "fd00:96:52::9/128 nodad")
	if out, _ := exec.Command("ip", "-6", "route", "show", "table", "local", "dev", name).CombinedOutput(); !strings.Contains(string(out), "local fd00:96:52::1 ") {
		t.Errorf("no local route for the IPv6 address added without NODAD:\n%s", out)
	}

	desired := map[netip.Addr]bool{}
	for _, a := range addrs("10.96.52.1", "10.96.52.2", "fd00:96:52::1", "fd00:96:52::2") {
		desired[a] = true
	}
	expectClean(t, resync(r, desired), 6)
	expectLinkAddrs(t, name, "10.96.52.1/32", "10.96.52.2/32", "fd00:96:52::1/128", "fd00:96:52::2/128 nodad")
	expectLinkAddrs(t, "kt-other", "10.96.52.9/32", "fd00:96:52::9/128 nodad")
	if lo := addrsOf(t, "lo"); !contains(lo, "10.96.52.9/32") {
		t.Errorf("resync removed lo's address: %v", lo)
	}
	if got := r.Addresses(); fmt.Sprint(got) != "[10.96.52.1 10.96.52.2 fd00:96:52::1 fd00:96:52::2]" {
		t.Errorf("Addresses() = %v", got)
	}

	expectClean(t, resync(r, desired), 0)
	expectClean(t, resync(New(name), desired), 0)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// The decision documented in the package comment: with kube-ipvs0 down, the VIPs bound to it,
// IPv4 and IPv6, are local addresses the node answers on, for pods too.
func TestGuestBoundVIPIsLocalWithLinkDown(t *testing.T) {
	fresh(t, name)
	client := guestutil.NewPod(t, "dcli", netip.MustParseAddr("10.244.53.20"), netip.MustParseAddr("fd00:244:53::20"))
	r := New(name)
	if err := r.EnsureLink(); err != nil {
		t.Fatal(err)
	}
	vips := addrs("10.96.53.1", "fd00:96:53::1")
	expectClean(t, r.Apply(vips, nil), 2)
	if l := nlLink(t, name); l.Attrs().Flags&net.FlagUp != 0 {
		t.Fatalf("%s is up", name)
	}
	for _, vip := range vips {
		target := netip.AddrPortFrom(vip, 7000)
		ln, err := net.Listen("tcp", target.String())
		if err != nil {
			t.Fatalf("listen on %s (a bound VIP must be a local address): %v", target, err)
		}
		defer ln.Close()
		go func() { _ = echoserver.ServeTCP(ln, echoserver.Name("node"), nil) }()
		if got, err := client.AskTCP(target); err != nil || got != "node" {
			t.Errorf("pod to %s: %q, %v", target, got, err)
		}
		if got, err := guestutil.AskTCP(target); err != nil || got != "node" {
			t.Errorf("node to %s: %q, %v", target, got, err)
		}
	}
	out, _ := exec.Command("ip", "route", "show", "table", "local", "dev", name).CombinedOutput()
	out6, _ := exec.Command("ip", "-6", "route", "show", "table", "local", "dev", name).CombinedOutput()
	t.Logf("local routes of the down %s:\n%s%s", name, out, out6)
	if !strings.Contains(string(out), "local 10.96.53.1") || !strings.Contains(string(out6), "local fd00:96:53::1") {
		t.Errorf("missing local routes for the VIPs")
	}

	// Unbound, the node no longer answers on it.
	expectClean(t, r.Apply(nil, vips[:1]), 1)
	if _, err := net.Listen("tcp", netip.AddrPortFrom(vips[0], 7001).String()); err == nil {
		t.Errorf("%s is still local after unbinding", vips[0])
	}
}

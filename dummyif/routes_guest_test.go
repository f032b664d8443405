//go:build guest

package dummyif

import (
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"reflect"
	"sort"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/kube-ipvs/kube-ipvs/test/echoserver"
	"github.com/kube-ipvs/kube-ipvs/test/guestutil"
)

// localRoutesOf lists every route in the local table through the link, the proxy's or
// not, as "prefix proto=N metric=M", sorted, leaving out IPv6 link-local ones.
func localRoutesOf(t *testing.T, link string) []string {
	t.Helper()
	filter := &netlink.Route{Table: unix.RT_TABLE_LOCAL, LinkIndex: nlLink(t, link).Attrs().Index, Type: unix.RTN_LOCAL}
	routes, err := netlink.RouteListFiltered(netlink.FAMILY_ALL, filter, netlink.RT_FILTER_TABLE|netlink.RT_FILTER_OIF|netlink.RT_FILTER_TYPE)
	if err != nil {
		t.Fatalf("list local routes through %s: %v", link, err)
	}
	out := []string{}
	for _, r := range routes {
		if r.Dst.IP.IsLinkLocalUnicast() {
			continue // the kernel's, for the link-local address an up link gets
		}
		out = append(out, fmt.Sprintf("%s proto=%d metric=%d", r.Dst, r.Protocol, r.Priority))
	}
	sort.Strings(out)
	return out
}

func expectLocalRoutes(t *testing.T, link string, want ...string) {
	t.Helper()
	if want == nil {
		want = []string{}
	}
	sort.Strings(want)
	if got := localRoutesOf(t, link); !reflect.DeepEqual(got, want) {
		t.Errorf("local routes through %s:\n  %v\nwant\n  %v", link, got, want)
	}
}

// addLocalRoute adds a local route as someone else would (protocol proto).
func addLocalRoute(t *testing.T, link, prefix string, proto, metric int) {
	t.Helper()
	p := netip.MustParsePrefix(prefix)
	r := localRoute(nlLink(t, link).Attrs().Index, &p)
	r.Protocol, r.Priority = netlink.RouteProtocol(proto), metric
	if err := netlink.RouteAdd(r); err != nil {
		t.Fatalf("add local route %s through %s: %v", prefix, link, err)
	}
}

// With route binding the link is up, each VIP (IPv4 and IPv6) has the proxy's local route
// and no address, and an IPv4 VIP is a local address a pod reaches a node listener on. (A
// node process cannot bind an IPv6 address that only a route makes local; IPVS needs no
// such bind, as the e2e traffic tests show.)
func TestGuestRouteBindingMakesVIPsLocal(t *testing.T) {
	fresh(t, name)
	client := guestutil.NewPod(t, "rcli", netip.MustParseAddr("10.244.60.20"), netip.MustParseAddr("fd00:244:60::20"))
	r := NewBinding(name, BindRoute, nil)
	vips := addrs("10.96.60.1", "fd00:96:60::1")
	expectClean(t, resync(r, map[netip.Addr]bool{vips[0]: true, vips[1]: true}), 4) // create, up, 2 routes
	if l := nlLink(t, name); l.Attrs().Flags&net.FlagUp == 0 {
		t.Fatalf("%s is down", name)
	}
	expectLocalRoutes(t, name, "10.96.60.1/32 proto=75 metric=75", "fd00:96:60::1/128 proto=75 metric=75")
	expectLinkAddrs(t, name)
	out, _ := exec.Command("ip", "route", "show", "table", "local", "dev", name).CombinedOutput()
	out6, _ := exec.Command("ip", "-6", "route", "show", "table", "local", "dev", name).CombinedOutput()
	t.Logf("ip route show table local dev %s:\n%s%s", name, out, out6)

	target := netip.AddrPortFrom(vips[0], 7000)
	ln, err := net.Listen("tcp", target.String())
	if err != nil {
		t.Fatalf("listen on %s (a route-bound VIP must be local): %v", target, err)
	}
	defer ln.Close()
	go func() { _ = echoserver.ServeTCP(ln, echoserver.Name("node"), nil) }()
	if got, err := client.AskTCP(target); err != nil || got != "node" {
		t.Errorf("pod to %s: %q, %v", target, got, err)
	}
	for _, vip := range vips {
		rs, err := netlink.RouteGet(vip.AsSlice())
		if err != nil || len(rs) != 1 || rs[0].Type != unix.RTN_LOCAL {
			t.Errorf("route to %s: %+v, %v; want one local route", vip, rs, err)
		}
	}

	expectClean(t, r.Apply(nil, vips), 2)
	expectLocalRoutes(t, name)
	if _, err := net.Listen("tcp", netip.AddrPortFrom(vips[0], 7001).String()); err == nil {
		t.Errorf("%s is still local after unbinding", vips[0])
	}
}

// Only the proxy's routes are ever listed or removed: local routes through kube-ipvs0 with
// another protocol (one to a desired VIP, one to an undesired one) and a route of the
// proxy's protocol through another link all stay, through Repair and Apply.
func TestGuestRouteBindingLeavesForeignRoutes(t *testing.T) {
	fresh(t, name)
	r := NewBinding(name, BindRoute, nil)
	if err := r.EnsureLink(); err != nil {
		t.Fatal(err)
	}
	addLocalRoute(t, name, "10.96.61.1/32", unix.RTPROT_STATIC, 0)
	addLocalRoute(t, name, "10.96.61.9/32", unix.RTPROT_BOOT, RouteMetric)
	addLocalRoute(t, name, "fd00:96:61::9/128", unix.RTPROT_STATIC, 1024)
	fresh(t, "kt-other")
	if err := netlink.LinkAdd(&netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Name: "kt-other"}}); err != nil {
		t.Fatal(err)
	}
	if err := netlink.LinkSetUp(nlLink(t, "kt-other")); err != nil {
		t.Fatal(err)
	}
	addLocalRoute(t, "kt-other", "10.96.61.8/32", RouteProtocol, RouteMetric)
	foreign := []string{"10.96.61.1/32 proto=4 metric=0", "10.96.61.9/32 proto=3 metric=75", "fd00:96:61::9/128 proto=4 metric=1024"}

	vips := addrs("10.96.61.1", "10.96.61.2", "fd00:96:61::1")
	desired := map[netip.Addr]bool{vips[0]: true, vips[1]: true, vips[2]: true}
	expectClean(t, resync(r, desired), 3)
	expectLocalRoutes(t, name, append([]string{"10.96.61.1/32 proto=75 metric=75", "10.96.61.2/32 proto=75 metric=75",
		"fd00:96:61::1/128 proto=75 metric=75"}, foreign...)...)
	expectClean(t, resync(r, desired), 0)
	expectClean(t, r.Apply(nil, vips), 3)
	expectClean(t, resync(r, map[netip.Addr]bool{}), 0)
	expectLocalRoutes(t, name, foreign...)
	expectLocalRoutes(t, "kt-other", "10.96.61.8/32 proto=75 metric=75")
}

// A restart that changes the binding converts the VIPs: address to route leaves no address
// (the kernel's IPv6 link-local one aside) and every VIP routed, though removing the last
// IPv4 address makes the kernel delete the IPv4 routes through the link; route to address
// leaves no route of the proxy's and foreign local routes in place.
func TestGuestConversionBetweenBindings(t *testing.T) {
	fresh(t, name)
	vips := addrs("10.96.62.1", "10.96.62.2", "fd00:96:62::1")
	desired := map[netip.Addr]bool{vips[0]: true, vips[1]: true, vips[2]: true}
	expectClean(t, resync(New(name), desired), 4)
	addAddr(t, name, "10.96.62.9/32", 0) // a VIP nobody wants any more
	r := NewBinding(name, BindRoute, nil)
	var found map[netip.Addr]bool
	res := r.Repair(WantAll(desired), nil, func(m map[netip.Addr]bool) { found = m })
	if res.Err != nil || len(res.Errors) != 0 {
		t.Fatalf("address to route: %+v", res)
	}
	if !found[netip.MustParseAddr("10.96.62.9")] || len(found) != 4 {
		t.Errorf("found %v: want the 4 addresses the link had", found)
	}
	expectLinkAddrs(t, name)
	routed := []string{"10.96.62.1/32 proto=75 metric=75", "10.96.62.2/32 proto=75 metric=75", "fd00:96:62::1/128 proto=75 metric=75"}
	expectLocalRoutes(t, name, routed...)
	expectClean(t, resync(r, desired), 0)

	addLocalRoute(t, name, "10.96.62.7/32", unix.RTPROT_STATIC, 0)
	back := New(name)
	res = resync(back, desired)
	if res.Err != nil || len(res.Errors) != 0 || res.Writes != 6 {
		t.Fatalf("route to address: %+v, want 3 addresses added and 3 routes removed", res)
	}
	expectLinkAddrs(t, name, "10.96.62.1/32", "10.96.62.2/32", "fd00:96:62::1/128 nodad")
	if got := localRoutesOf(t, name); contains(got, routed[0]) || contains(got, routed[2]) || !contains(got, "10.96.62.7/32 proto=4 metric=0") {
		t.Errorf("local routes through %s after the conversion: %v", name, got)
	}
	expectClean(t, resync(back, desired), 0)
}

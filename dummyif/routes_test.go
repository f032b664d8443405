package dummyif

import (
	"errors"
	"net/netip"
	"reflect"
	"testing"
)

func expectRoutes(t *testing.T, f *FakeNetlink, link string, want ...string) {
	t.Helper()
	if want == nil {
		want = []string{}
	}
	if got := f.Routes(link); !reflect.DeepEqual(got, want) {
		t.Errorf("local routes through %s: %v, want %v", link, got, want)
	}
}

func TestParseBinding(t *testing.T) {
	for _, s := range []string{"address", "route"} {
		if b, err := ParseBinding(s); err != nil || string(b) != s {
			t.Errorf("ParseBinding(%q) = %q, %v", s, b, err)
		}
	}
	if _, err := ParseBinding("routes"); err == nil {
		t.Error("ParseBinding(routes) accepted")
	}
}

// With BindRoute the link is created and set up (IPv6 needs it), each VIP gets a local
// route and no address, and a right link costs one listing.
func TestRouteBindingResyncAndApply(t *testing.T) {
	f := NewFakeNetlink()
	r := NewBinding(name, BindRoute, f)
	expectClean(t, resync(r, map[netip.Addr]bool{v4a: true, v6a: true}), 4)
	expectOps(t, f,
		"link kube-ipvs0", "add-dummy kube-ipvs0", "link kube-ipvs0", "link-up 2",
		"route-list 2",
		"addr-list 2", // the first listing repair looks for VIPs bound as addresses, to convert them
		"route-add 2 10.96.0.1/32",
		"route-add 2 fd00:96::1/128")
	expectRoutes(t, f, name, "10.96.0.1/32", "fd00:96::1/128")
	expectAddrs(t, f, name)
	if !f.IsUp(name) {
		t.Error("link left down")
	}

	expectClean(t, resync(r, map[netip.Addr]bool{v4a: true, v6a: true}), 0)
	expectOps(t, f, "link kube-ipvs0", "route-list 2")

	expectClean(t, r.Apply([]netip.Addr{v4b, v4a}, []netip.Addr{v6a}), 2)
	expectOps(t, f, "route-add 2 10.96.0.2/32", "route-del 2 fd00:96::1/128")
	expectRoutes(t, f, name, "10.96.0.1/32", "10.96.0.2/32")

	// Someone set the link down: the next listing repair sets it up again.
	f.mu.Lock()
	f.links[name].Up = false
	f.mu.Unlock()
	expectClean(t, resync(r, map[netip.Addr]bool{v4a: true, v4b: true}), 1)
	expectOps(t, f, "link kube-ipvs0", "link-up 2", "route-list 2")
}

// A restart from address to route binding: every desired VIP gets its route before any
// address goes, every address goes (the link is the proxy's; the kernel's IPV6 link-local
// one stays), the virtual servers on the old addresses are reported as found, and later
// Repairs no longer look at addresses.
func TestRouteBindingConvertsAddresses(t *testing.T) {
	f := NewFakeNetlink()
	f.PutLink(name, "dummy")
	f.PutAddr(name, host(v4a), 0)
	f.PutAddr(name, host(v6a), 0)
	f.PutAddr(name, pfx("10.96.9.9/32"), 0) // a VIP no Service wants any more
	f.PutAddr(name, pfx("fe80::1/64"), 0)
	r := NewBinding(name, BindRoute, f)
	var found map[netip.Addr]bool
	res := r.Repair(WantAll(map[netip.Addr]bool{v4a: true, v6a: true}), nil, func(m map[netip.Addr]bool) { found = m })
	expectClean(t, res, 7)
	expectOps(t, f,
		"link kube-ipvs0", "link-up 2",
		"route-list 2", "addr-list 2",
		"route-add 2 10.96.0.1/32", "route-add 2 fd00:96::1/128",
		"addr-del 2 10.96.0.1/32", "addr-del 2 10.96.9.9/32", "addr-del 2 fd00:96::1/128",
		// The last IPv4 address took the IPv4 routes with it, as in the kernel.
		"route-list 2", "route-add 2 10.96.0.1/32")
	expectRoutes(t, f, name, "10.96.0.1/32", "fd00:96::1/128")
	expectAddrs(t, f, name, "fe80::1/64")
	want := map[netip.Addr]bool{v4a: true, v6a: true, netip.MustParseAddr("10.96.9.9"): true}
	if !reflect.DeepEqual(found, want) {
		t.Errorf("found %v, want %v", found, want)
	}
	expectClean(t, resync(r, map[netip.Addr]bool{v4a: true, v6a: true}), 0)
	expectOps(t, f, "link kube-ipvs0", "route-list 2")
}

// The way back: addresses first, then the proxy's routes go.
func TestAddressBindingConvertsRoutes(t *testing.T) {
	f := NewFakeNetlink()
	f.PutLink(name, "dummy")
	f.PutRoute(name, host(v4a))
	f.PutRoute(name, host(v4b))
	r := NewWithNetlink(name, f)
	expectClean(t, resync(r, map[netip.Addr]bool{v4a: true}), 3)
	expectOps(t, f,
		"link kube-ipvs0", "addr-list 2", "route-list 2",
		"addr-add 2 10.96.0.1/32 flags=0x0",
		"route-del 2 10.96.0.1/32", "route-del 2 10.96.0.2/32")
	expectRoutes(t, f, name)
	expectAddrs(t, f, name, "10.96.0.1/32")
}

// A conversion that failed halfway is finished by the next listing repair, which lists the
// other binding again.
func TestConversionRetriesAfterAFailure(t *testing.T) {
	f := NewFakeNetlink()
	f.PutLink(name, "dummy")
	f.PutRoute(name, host(v4b))
	r := NewWithNetlink(name, f)
	f.Fail = func(op, _ string) error {
		if op == "route-del" {
			return errors.New("refused")
		}
		return nil
	}
	if res := resync(r, map[netip.Addr]bool{v4a: true}); len(res.Errors) != 1 || res.Errors[v4b] == nil {
		t.Fatalf("failed unbind not reported per VIP: %+v", res)
	}
	f.Fail = nil
	f.TakeOps()
	expectClean(t, resync(r, map[netip.Addr]bool{v4a: true}), 1)
	expectOps(t, f, "link kube-ipvs0", "addr-list 2", "route-list 2", "route-del 2 10.96.0.2/32")
	expectClean(t, resync(r, map[netip.Addr]bool{v4a: true}), 0)
	expectOps(t, f, "link kube-ipvs0", "addr-list 2")
}

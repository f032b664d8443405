//go:build guest

package bench

import (
	"maps"
	"net/netip"
	"testing"

	mobyipvs "github.com/moby/ipvs"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/kube-ipvs/kube-ipvs/ipvs"
	"github.com/kube-ipvs/kube-ipvs/model"
	"github.com/kube-ipvs/kube-ipvs/test/guestutil"
	"github.com/kube-ipvs/kube-ipvs/test/netnstest"
)

// The bench's own real-server reader sees what moby/ipvs sees, for IPv4, IPv6 and
// firewall-mark virtual servers, nothing for an absent one, and reads without allocating
// per call beyond what its caller keeps.
func TestGuestDestReaderMatchesMoby(t *testing.T) {
	guestutil.RequireGuest(t)
	netnstest.EnterNew(t)
	// IPVS refuses a real server whose address type the namespace cannot tell (a namespace
	// with no local table yet): loopback up makes one, as in the bench's namespaces.
	lo, err := netlink.LinkByName("lo")
	if err == nil {
		err = netlink.LinkSetUp(lo)
	}
	if err != nil {
		t.Fatalf("loopback up: %v", err)
	}
	p, err := newProbe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.dests.close)
	t.Cleanup(p.h.Close)

	type vs struct {
		key   model.VSKey
		reals map[model.RSKey]uint32
	}
	rs := func(s string, w uint32) (model.RSKey, uint32) {
		ap := netip.MustParseAddrPort(s)
		return model.RSKey{Addr: ap.Addr(), Port: ap.Port()}, w
	}
	reals := func(pairs ...any) map[model.RSKey]uint32 {
		m := map[model.RSKey]uint32{}
		for i := 0; i < len(pairs); i += 2 {
			k, w := rs(pairs[i].(string), pairs[i+1].(uint32))
			m[k] = w
		}
		return m
	}
	cases := []vs{
		{model.VSKey{Addr: netip.MustParseAddr("10.96.0.10"), Proto: model.TCP, Port: 80},
			reals("10.244.0.1:8080", uint32(1), "10.244.0.2:8080", uint32(0), "10.244.0.3:9090", uint32(7))},
		{model.VSKey{Addr: netip.MustParseAddr("fd00::a"), Proto: model.UDP, Port: 53},
			reals("[fd00:1::1]:53", uint32(1), "[fd00:1::2]:5353", uint32(3))},
		{model.FWMarkKey(0x4000, false), reals("10.244.0.9:80", uint32(2))},
	}
	k, err := ipvs.NewKernel() // written by the proxy's code, read by the probe's and moby's
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		if err := k.NewService(c.key, model.VSSpec{Scheduler: "rr"}); err != nil {
			t.Fatalf("create %s: %v", c.key, err)
		}
		for rs, w := range c.reals {
			if err := k.NewDestination(c.key, rs, w); err != nil {
				t.Fatalf("add %s to %s: %v", rs, c.key, err)
			}
		}
		svc := service(c.key)
		if c.key.FWMark != 0 {
			svc = &mobyipvs.Service{FWMark: c.key.FWMark, AddressFamily: unix.AF_INET, Netmask: 0xffffffff}
		}
		got, err := p.reals(c.key)
		if err != nil {
			t.Fatalf("reals of %s: %v", c.key, err)
		}
		if !maps.Equal(got, c.reals) {
			t.Errorf("reals of %s: %v, want %v", c.key, got, c.reals)
		}
		dests, err := p.h.GetDestinations(svc)
		if err != nil || len(dests) != len(c.reals) {
			t.Errorf("moby lists %d real servers of %s (%v), want %d", len(dests), c.key, err, len(c.reals))
		}
	}
	absent := model.VSKey{Addr: netip.MustParseAddr("10.96.0.99"), Proto: model.TCP, Port: 80}
	if got, err := p.reals(absent); err != nil || len(got) != 0 {
		t.Errorf("reals of an absent virtual server: %v (%v), want none", got, err)
	}
	n := 0
	allocs := testing.AllocsPerRun(50, func() {
		if err := p.dests.reals(cases[0].key, func(model.RSKey, uint32) { n++ }); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 2 || n != 51*len(cases[0].reals) {
		t.Errorf("%v allocations per read, %d real servers seen; want at most 2 and %d", allocs, n, 51*len(cases[0].reals))
	}
}

//go:build guest

package ipvs

import (
	"net/netip"
	"testing"

	mobyipvs "github.com/moby/ipvs"
	"golang.org/x/sys/unix"

	"github.com/kube-ipvs/kube-ipvs/model"
)

// crossCheckVSes covers every field the project's encoding writes: both families, the three
// protocols, schedulers with and without flags, persistence, and weights up to the maximum.
func crossCheckVSes() []*model.VirtualServer {
	return []*model.VirtualServer{
		vs(key("10.97.30.1:80", model.TCP), "rr", "10.244.30.1:8080", 1, "10.244.30.2:8080", 1),
		vs(key("10.97.30.1:53", model.UDP), "wrr", "10.244.30.1:53", 3, "10.244.30.2:53", maxWeight),
		vs(key("10.97.30.2:9000", model.SCTP), "lc", "10.244.30.3:9000", 1),
		withSpec(vs(key("10.97.30.3:443", model.TCP), "sh", "10.244.30.4:8443", 1, "10.244.30.5:8443", 2),
			model.VSSpec{Scheduler: "sh", Flags: model.FlagSchedFallbk | model.FlagSchedPort}),
		withSpec(vs(key("10.97.30.4:80", model.TCP), "rr", "10.244.30.6:80", 1),
			model.VSSpec{Scheduler: "rr", Flags: model.FlagPersistent, Timeout: 10800}),
		withSpec(vs(key("[fd00:97:30::1]:443", model.TCP), "mh", "[fd00:244:30::1]:8443", 1, "[fd00:244:30::2]:8443", 4),
			model.VSSpec{Scheduler: "mh", Flags: model.FlagSchedFallbk | model.FlagPersistent, Timeout: 60}),
		vs(key("[fd00:97:30::2]:53", model.UDP), "nq", "[fd00:244:30::3]:53", 5),
		// Firewall-mark virtual servers: keyed by mark and family only.
		vs(model.FWMarkKey(model.InClusterMark(30130, model.TCP, -1), false), "rr", "10.244.30.7:8080", 1, "10.244.30.8:8080", 2),
		withSpec(vs(model.FWMarkKey(model.InClusterMark(30130, model.TCP, -1), true), "rr", "[fd00:244:30::4]:8080", 1),
			model.VSSpec{Scheduler: "rr", Flags: model.FlagPersistent, Timeout: 300}),
	}
}

// What the project's encoding writes, moby/ipvs's decoding reads back field for field (and
// ipvsadm, an independent third decoder, is checked in TestGuestCreateAndReadBack).
func TestGuestOwnEncodingReadByMobyIPVS(t *testing.T) {
	k := newKernel(t)
	r := NewReconciler(k)
	want := crossCheckVSes()
	for _, v := range want {
		deleteAtEnd(t, k, v.Key)
	}
	expectClean(t, r.Apply(changes(want...)), 9+14)

	h, err := mobyipvs.New("")
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	for _, v := range want {
		s, err := h.GetService(service(v.Key, v.Spec))
		if err != nil {
			t.Fatalf("moby/ipvs cannot read %s: %v", v.Key, err)
		}
		if got, ok := keyOf(s); !ok || got != v.Key {
			t.Errorf("moby/ipvs reads key %v (%v), want %s", got, ok, v.Key)
		}
		if got := specOf(s); got != v.Spec {
			t.Errorf("%s: moby/ipvs reads spec %+v, want %+v", v.Key, got, v.Spec)
		}
		wantMask := uint32(0xffffffff)
		if v.Key.Addr.Is6() {
			wantMask = 128
		}
		if s.Netmask != wantMask {
			t.Errorf("%s: netmask %#x, want %#x (one address per persistence entry)", v.Key, s.Netmask, wantMask)
		}
		dests, err := h.GetDestinations(s)
		if err != nil {
			t.Fatalf("moby/ipvs cannot list the real servers of %s: %v", v.Key, err)
		}
		got := map[model.RSKey]uint32{}
		for _, d := range dests {
			addr, _ := netip.AddrFromSlice(d.Address)
			got[model.RSKey{Addr: addr.Unmap(), Port: d.Port}] = uint32(d.Weight)
			if d.ConnectionFlags&0x7 != mobyipvs.ConnectionFlagMasq {
				t.Errorf("%s: real server %s forwards with %#x, want masquerading", v.Key, d.Address, d.ConnectionFlags)
			}
			wantAF := uint16(unix.AF_INET)
			if v.Key.Addr.Is6() {
				wantAF = unix.AF_INET6
			}
			if d.AddressFamily != wantAF {
				t.Errorf("%s: real server %s has family %d, want %d", v.Key, d.Address, d.AddressFamily, wantAF)
			}
		}
		if !(&model.VirtualServer{Key: v.Key, Spec: v.Spec, Reals: got}).Equal(v) {
			t.Errorf("%s: moby/ipvs reads real servers %v, want %v", v.Key, got, v.Reals)
		}
	}
}

// What moby/ipvs writes, the project's decoding reads back equal, one at a time and in the
// dump, and the reconciler adopts it with no write.
func TestGuestMobyIPVSWritesReadByOwnDecoding(t *testing.T) {
	k := newKernel(t)
	h, err := mobyipvs.New("")
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	want := crossCheckVSes()
	for _, v := range want {
		deleteAtEnd(t, k, v.Key)
		s := service(v.Key, v.Spec)
		if err := h.NewService(s); err != nil {
			t.Fatalf("moby/ipvs create %s: %v", v.Key, err)
		}
		for rs, w := range v.Reals {
			if err := h.NewDestination(s, destination(rs, w)); err != nil {
				t.Fatalf("moby/ipvs add %s to %s: %v", rs, v.Key, err)
			}
		}
	}
	all := listed(t, k)
	for _, v := range want {
		mustEqual(t, k, v)
		if got := all[v.Key]; got == nil || !got.Equal(v) {
			t.Errorf("the dump has %v, want %v", got, v)
		}
	}
	desired := changes(want...)
	r := NewReconciler(k)
	expectClean(t, resync(r, desired, func(key model.VSKey) bool { return desired[key] != nil }), 0)
}

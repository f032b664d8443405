package firewall

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"slices"
	"testing"
	"unsafe"

	v1 "k8s.io/api/core/v1"

	"github.com/kube-ipvs/kube-ipvs/model"
)

func sampleEntries() []Entry {
	return []Entry{
		{IP: netip.MustParseAddr("10.96.0.1")},
		{IP: netip.MustParseAddr("fd00::1")},
		{IP: netip.MustParseAddr("10.96.0.1"), Proto: model.TCP, Port: 80},
		{IP: netip.MustParseAddr("10.96.0.1"), Proto: model.UDP, Port: 80},
		{IP: netip.MustParseAddr("10.96.0.2"), Proto: model.TCP, Port: 53},
		{IP: netip.MustParseAddr("fd00::1"), Proto: model.SCTP, Port: 443},
		{IP: netip.MustParseAddr("10.244.0.1"), Proto: model.TCP, Port: 8080, IP2: netip.MustParseAddr("10.244.0.1")},
		{IP: netip.MustParseAddr("10.244.0.1"), Proto: model.TCP, Port: 8080, IP2: netip.MustParseAddr("10.244.0.2")},
		{IP: netip.MustParseAddr("fd00:244::1"), Proto: model.TCP, Port: 8080, IP2: netip.MustParseAddr("fd00:244::1")},
		{IP: netip.MustParseAddr("203.0.113.7"), Proto: model.TCP, Port: 443, Net: netip.MustParsePrefix("198.51.100.0/24")},
		{IP: netip.MustParseAddr("203.0.113.7"), Proto: model.TCP, Port: 443, Net: netip.MustParsePrefix("198.51.0.0/16")},
		{IP: netip.MustParseAddr("2001:db8::7"), Proto: model.TCP, Port: 443, Net: netip.MustParsePrefix("2001:db8:1::/48")},
		{IP: netip.MustParseAddr("::ffff:10.0.0.1")},
		{Port: 32000},
		{Port: 0},
		{},
	}
}

// Packing loses nothing an entry can hold, and packed entries order as EntryLess orders
// theirs.
func TestPackedRoundTripAndOrder(t *testing.T) {
	es := sampleEntries()
	for _, e := range es {
		if got := e.Pack().Entry(); got != e {
			t.Errorf("%v packs and unpacks to %v", e, got)
		}
	}
	for _, a := range es {
		for _, b := range es {
			want := 0
			switch {
			case EntryLess(a, b):
				want = -1
			case EntryLess(b, a):
				want = 1
			}
			if got := a.Pack().Compare(b.Pack()); got != want {
				t.Errorf("Compare(%v, %v) = %d, EntryLess says %d", a, b, got, want)
			}
		}
	}
	if s := unsafe.Sizeof(Packed{}); s > 40 {
		t.Errorf("Packed takes %d bytes", s)
	}
	for _, n := range []SetName{SetClusterIP, Name(SetLoopBack, IPv6), SetHealthCheckNodePort, "OTHER"} {
		if got := IDOf(n).Name(); got != n {
			t.Errorf("IDOf(%s).Name() = %s", n, got)
		}
	}
}

// A Tracker fed members without Changes (a repair, a cold start) ends where one fed the same
// members with Changes (a sync) ends.
func TestUpdateMembersWithoutChangesEndsTheSame(t *testing.T) {
	cfg := Config{NodeIPs: []netip.Addr{netip.MustParseAddr("192.168.1.10")}}
	withChanges, without := NewTracker(), NewTracker()
	members := map[model.ServiceName][]Member{}
	for i := range 30 {
		_, st := lbService(i)
		name := model.ServiceName{Namespace: "ns", Name: fmt.Sprint(i)}
		members[name] = AppendMembers(nil, st, cfg)
		if add, _ := withChanges.UpdateMembers(map[model.ServiceName][]Member{name: AppendMembers(nil, st, cfg)}, true); len(add) == 0 {
			t.Fatalf("service %d added nothing", i)
		}
	}
	if add, del := without.UpdateMembers(members, false); add != nil || del != nil {
		t.Errorf("without changes, UpdateMembers returned %v %v", add, del)
	}
	if !slices.Equal(lines(desired(without)), lines(desired(withChanges))) {
		t.Errorf("trackers differ:\n%v\n%v", lines(desired(without)), lines(desired(withChanges)))
	}
	for _, n := range withChanges.Names() {
		count := 0
		without.Range(n, func(p Packed) bool {
			count++
			if !withChanges.Has(n, p) {
				t.Errorf("%s: %v only in one tracker", n, p.Entry())
			}
			return true
		})
		if count != withChanges.Count(n) {
			t.Errorf("%s: %d entries, want %d", n, count, withChanges.Count(n))
		}
	}
}

// The Tracker's cost per entry: at 50,000 Services x 10 endpoints the hairpin set alone
// has 550,000 entries, each kept once per Service and once in the owner counts.
func TestTrackerMemoryPerEntry(t *testing.T) {
	const services, endpoints = 2000, 10
	rng := rand.New(rand.NewPCG(3, 4))
	updates := map[model.ServiceName][]Member{}
	for i := range services {
		var ms []Member
		for j := range endpoints {
			a := netip.AddrFrom4([4]byte{10, byte(128 + rng.IntN(64)), byte(i >> 4), byte(16*(i%16) + j)})
			ms = append(ms, Member{Set: IDOf(SetLoopBack), Entry: Entry{IP: a, Proto: model.TCP, Port: 8080, IP2: a}.Pack()})
		}
		updates[model.ServiceName{Namespace: "ns", Name: fmt.Sprint(i)}] = ms
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	tr := NewTracker()
	tr.UpdateMembers(updates, false)
	updates = nil
	runtime.GC()
	runtime.ReadMemStats(&after)
	perEntry := float64(after.HeapAlloc-before.HeapAlloc) / (services * endpoints)
	t.Logf("%.0f bytes per entry", perEntry)
	if perEntry > 160 {
		t.Errorf("the Tracker keeps %.0f bytes per entry", perEntry)
	}
	runtime.KeepAlive(tr)
}

// lbService is a varied Service i with its desired state: plain, load balancer with a
// local policy, source ranges and a health check, dual-stack, external IP.
func lbService(i int) (*v1.Service, *model.ServiceState) {
	cip := fmt.Sprintf("10.0.%d.%d", i/250, i%250+1)
	ep1, ep2 := fmt.Sprintf("10.1.%d.1:8080", i), fmt.Sprintf("10.1.%d.2:8080", i)
	opts := []svcOpt{func(s *v1.Service) { s.Spec.ClusterIP, s.Spec.ClusterIPs = cip, []string{cip} }}
	vses := []string{"TCP " + cip + ":80 -> " + ep1 + " " + ep2}
	bind := []string{cip}
	switch i % 4 {
	case 1:
		lb := fmt.Sprintf("203.0.113.%d", i+1)
		opts = append(opts, lbType(lb), local, sourceRangesOpt("198.51.100.0/24", "192.168.0.0/16"), healthCheck(int32(32000+i)))
		vses = append(vses, "TCP "+lb+":80 -> "+ep1, "TCP 192.168.1.10:30080 -> "+ep1)
		bind = append(bind, lb)
	case 2:
		v6 := fmt.Sprintf("fd00::%x", i+1)
		opts = append(opts, func(s *v1.Service) { s.Spec.ClusterIPs = append(s.Spec.ClusterIPs, v6) })
		vses = append(vses, "TCP ["+v6+"]:80 -> [fd00:244::"+fmt.Sprintf("%x", i+1)+"]:8080")
		bind = append(bind, v6)
	case 3:
		ext := fmt.Sprintf("198.18.0.%d", i+1)
		opts = append(opts, external(ext))
		vses = append(vses, "TCP "+ext+":80 -> "+ep2)
		bind = append(bind, ext)
	}
	svc := service(opts...)
	return svc, resolved(svc, state(bind, vses...))
}

// Same tells a Service whose entries did not change, so a full sync need not stage it.
func TestTrackerSame(t *testing.T) {
	tr := NewTracker()
	name := model.ServiceName{Namespace: "ns", Name: "a"}
	_, st := lbService(1)
	cfg := Config{}
	ms := AppendMembers(nil, st, cfg)
	if tr.Same(name, SortMembers(slices.Clone(ms))) {
		t.Fatal("an unknown Service with entries is the same as none")
	}
	if !tr.Same(name, nil) {
		t.Fatal("an unknown Service without entries differs from none")
	}
	tr.UpdateMembers(map[model.ServiceName][]Member{name: slices.Clone(ms)}, false)
	again := AppendMembers(nil, st, cfg)
	rand.New(rand.NewPCG(1, 1)).Shuffle(len(again), func(i, j int) { again[i], again[j] = again[j], again[i] })
	if !tr.Same(name, SortMembers(append(again, again[0]))) {
		t.Fatal("the same entries, in another order and repeated, differ")
	}
	if tr.Same(name, SortMembers(again[1:])) {
		t.Fatal("one entry fewer is the same")
	}
}

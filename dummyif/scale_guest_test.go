//go:build guest

package dummyif

import (
	"net/netip"
	"testing"
	"time"
)

// Tens of thousands of VIPs on one link, in both bindings: bound in batches, the listing
// that a repair reads back spans many netlink messages, a repair of a right link writes
// nothing, and unbinding works. The time per thousand VIPs and the total are logged: as
// addresses, the kernel walks the link's address list on every add, so it grows with the
// addresses already there; as local routes it stays flat.
func TestGuestManyAddresses(t *testing.T) {
	for _, b := range Bindings() {
		t.Run(string(b), func(t *testing.T) { testManyVIPs(t, b) })
	}
}

func testManyVIPs(t *testing.T, b Binding) {
	const link, n, chunk = "kt-many", 20000, 2000
	fresh(t, link)
	r := NewBinding(link, b, nil)
	if err := r.EnsureLink(); err != nil {
		t.Fatal(err)
	}
	all := make([]netip.Addr, 0, n)
	desired := map[netip.Addr]bool{}
	for i := range n {
		a := netip.AddrFrom4([4]byte{10, 100, byte(i >> 8), byte(i)})
		all = append(all, a)
		desired[a] = true
	}
	begin := time.Now()
	for start := 0; start < n; start += chunk {
		t0 := time.Now()
		res := r.Apply(all[start:start+chunk], nil)
		if res.Err != nil || len(res.Errors) != 0 || res.Added != chunk {
			t.Fatalf("binding %d..%d: %+v", start, start+chunk, res)
		}
		t.Logf("%s %5d-%5d: %s per VIP", b, start, start+chunk, time.Since(t0)/chunk)
	}
	t.Logf("BENCH vip-binding=%s: %d VIPs bound in %.1f s", b, n, time.Since(begin).Seconds())
	t0 := time.Now()
	res := resync(r, desired)
	if res.Err != nil || res.Writes != 0 {
		t.Fatalf("resync of a right link: %+v", res)
	}
	t.Logf("BENCH vip-binding=%s: listing %d VIPs (first repair, both bindings listed): %s", b, n, time.Since(t0))
	t0 = time.Now()
	if res := resync(r, desired); res.Err != nil || res.Writes != 0 {
		t.Fatalf("second resync of a right link: %+v", res)
	}
	t.Logf("BENCH vip-binding=%s: listing %d VIPs (periodic repair): %s", b, n, time.Since(t0))
	if got := len(r.Addresses()); got != n {
		t.Fatalf("%d VIPs known, want %d", got, n)
	}
	t0 = time.Now()
	if res := r.Apply(nil, all); res.Err != nil || len(res.Errors) != 0 || res.Removed != n {
		t.Fatalf("unbinding: %+v", res)
	}
	t.Logf("BENCH vip-binding=%s: unbinding %d in %.1f s", b, n, time.Since(t0).Seconds())
	if res := resync(r, map[netip.Addr]bool{}); res.Err != nil || res.Writes != 0 {
		t.Fatalf("resync of an empty link: %+v", res)
	}
}

//go:build guest

package dummyif

import (
	"net/netip"
	"testing"
	"time"
)

// Tens of thousands of VIPs on one link: bound in batches, the listing that Resync reads
// back spans many netlink messages, a Resync of a right link writes nothing, and unbinding
// works. The time per thousand addresses is logged: the kernel walks the link's address
// list on every add, so it grows with the addresses already there.
func TestGuestManyAddresses(t *testing.T) {
	const link, n, chunk = "kt-many", 20000, 2000
	fresh(t, link)
	r := New(link)
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
	for start := 0; start < n; start += chunk {
		t0 := time.Now()
		res := r.Apply(all[start:start+chunk], nil)
		if res.Err != nil || len(res.Errors) != 0 || res.Added != chunk {
			t.Fatalf("binding %d..%d: %+v", start, start+chunk, res)
		}
		t.Logf("addresses %5d-%5d: %s per address", start, start+chunk, time.Since(t0)/chunk)
	}
	t0 := time.Now()
	res := r.Resync(desired)
	if res.Err != nil || res.Writes != 0 {
		t.Fatalf("resync of a right link: %+v", res)
	}
	t.Logf("listing %d addresses: %s", n, time.Since(t0))
	if got := len(r.Addresses()); got != n {
		t.Fatalf("%d addresses known, want %d", got, n)
	}
	t0 = time.Now()
	if res := r.Apply(nil, all); res.Err != nil || len(res.Errors) != 0 || res.Removed != n {
		t.Fatalf("unbinding: %+v", res)
	}
	t.Logf("unbinding: %s per address", time.Since(t0)/n)
	if res := r.Resync(map[netip.Addr]bool{}); res.Err != nil || res.Writes != 0 {
		t.Fatalf("resync of an empty link: %+v", res)
	}
}

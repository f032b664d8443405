//go:build guest

package ipvs

import (
	"net/netip"
	"os/exec"
	"testing"
	"time"

	"github.com/kube-ipvs/kube-ipvs/model"
)

// runCheckOn steps a check over the real kernel to its end, as the sync loop does.
func runCheckOn(t *testing.T, r *Reconciler, desired map[model.VSKey]*model.VirtualServer, owned func(model.VSKey) bool) (listed bool, res Result) {
	t.Helper()
	c, err := r.BeginCheck(keysOf(desired))
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); !c.Listed(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the background listing never came in")
		}
	}
	for done := false; !done; {
		var r Result
		r, done = c.Step(50, lookup(desired), owned)
		if r.Err != nil || len(r.Errors) > 0 {
			t.Fatalf("check step: %v %v", r.Err, r.Errors)
		}
		res.Writes += r.Writes
	}
	return c.ListsTable(), res
}

// Over the real kernel: a check between two listings of the table reads the proxy's virtual
// servers by key and repairs what ipvsadm did to them (a scheduler changed, a real server
// deleted, a virtual server deleted), after which traffic reaches both backends again; a
// stray ipvsadm added on an owned address is left until a check lists the table, which
// deletes it and leaves a foreign one alone. How long the listing took, which the
// reconciler measures, is what spaces the listings.
func TestGuestKeyedCheckRepairsDriftAndTheListingFindsStrays(t *testing.T) {
	k := newKernel(t)
	lister, err := NewBackgroundKernel(nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lister.(interface{ Close() error }).Close() })
	cli, target := twoBackendsBehindAVIP(t, "key", 31, netip.MustParseAddr("10.97.31.1"))

	desired := changes(
		vs(key(target.String(), model.TCP), "rr", "10.244.31.1:8080", 1, "10.244.31.2:8080", 1),
		vs(key("10.97.31.1:53", model.UDP), "rr", "10.244.31.1:53", 1),
		vs(key("10.97.31.2:80", model.TCP), "lc", "10.244.31.2:80", 1),
	)
	owned := func(k model.VSKey) bool { return netip.MustParsePrefix("10.97.31.0/24").Contains(k.Addr) }
	stray, foreign := key("10.97.31.1:8080", model.TCP), key("192.0.2.60:80", model.TCP)
	for key := range desired {
		deleteAtEnd(t, k, key)
	}
	deleteAtEnd(t, k, stray)
	t.Cleanup(func() { _ = exec.Command("ipvsadm", "-D", "-t", "192.0.2.60:80").Run() })

	r := NewReconciler(k)
	r.Lister = lister.(ServiceLister)
	expectClean(t, resync(r, desired, owned), 7)
	next, took := r.NextListing()
	if took <= 0 || next.IsZero() {
		t.Fatalf("after the resync's listing: next listing at %v, listing time %v; want it measured", next, took)
	}
	t.Logf("the kernel listed %d virtual servers in %v", len(listed(t, k)), took)

	// Drift and a stray, by the tool users know.
	ipvsadm(t, "-E", "-t", target.String(), "-s", "sh")
	ipvsadm(t, "-d", "-t", target.String(), "-r", "10.244.31.2:8080")
	ipvsadm(t, "-D", "-u", "10.97.31.1:53")
	ipvsadm(t, "-A", "-t", "10.97.31.1:8080", "-s", "rr")
	ipvsadm(t, "-A", "-t", "192.0.2.60:80", "-s", "wlc")

	// Between listings: as if the last listing had taken an hour.
	r.mu.Lock()
	r.listingTook = time.Hour
	r.mu.Unlock()
	listedTable, res := runCheckOn(t, r, desired, owned)
	if listedTable {
		t.Fatal("the check listed the table a moment after a listing of an hour")
	}
	if res.Writes != 4 {
		t.Errorf("the keyed check wrote %d times, want 4 (the scheduler, the real server, the virtual server and its real server)", res.Writes)
	}
	got := listed(t, k)
	for key, want := range desired {
		if !want.Equal(got[key]) {
			t.Errorf("after the keyed check the kernel has %v, want %v", got[key], want)
		}
	}
	if _, ok := got[stray]; !ok {
		t.Error("a check that did not list the table deleted the stray: it cannot have seen it")
	}
	seen := map[string]bool{}
	for i := 0; i < 8 && len(seen) < 2; i++ {
		backend, err := cli.AskTCP(target)
		if err != nil {
			t.Fatalf("connect from %s to %s: %v", cli.Name, target, err)
		}
		seen[backend] = true
	}
	if !seen["srv1"] || !seen["srv2"] {
		t.Errorf("after the repair new connections reached %v, want both srv1 and srv2 (round robin over both)", seen)
	}

	// Once the listing is due again, the check lists the table and deletes the stray alone.
	r.mu.Lock()
	r.listingTook = 0
	r.mu.Unlock()
	listedTable, res = runCheckOn(t, r, desired, owned)
	if !listedTable || res.Writes != 1 {
		t.Fatalf("the check that was due to list: listed %v, %d writes; want listed, 1 (the stray)", listedTable, res.Writes)
	}
	got = listed(t, k)
	if _, ok := got[stray]; ok {
		t.Error("the listing check left the stray on an owned address")
	}
	if _, ok := got[foreign]; !ok {
		t.Error("the listing check deleted a foreign virtual server")
	}
	if _, took := r.NextListing(); took <= 0 {
		t.Errorf("the background listing's time is %v, want it measured", took)
	}
}

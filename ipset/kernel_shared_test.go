package ipset

// Real-kernel tests, shared by the host (kernel_host_test.go: a fresh network namespace the
// test creates) and the guest (kernel_guest_test.go: Debian's kernel). Every test starts in
// its own new network namespace, so it never sees or changes another namespace's sets.

import (
	"errors"
	"net/netip"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kube-ipvs/kube-ipvs/firewall"
	"github.com/kube-ipvs/kube-ipvs/internal/foreground"
	"github.com/kube-ipvs/kube-ipvs/model"
	"github.com/kube-ipvs/kube-ipvs/test/netnstest"
)

// newKernel enters a new namespace and opens a netlink kernel there.
func newKernel(t *testing.T) *NetlinkKernel {
	t.Helper()
	netnstest.EnterNew(t)
	k, err := NewKernel()
	if err != nil {
		t.Fatalf("NewKernel: %v", err)
	}
	t.Cleanup(k.Close)
	return k
}

// ipsetTool runs the ipset binary (in the test's namespace), to cross-check what netlink
// wrote with the tool operators use.
func ipsetTool(t *testing.T, args ...string) string {
	t.Helper()
	return netnstest.Run(t, "ipset", args...)
}

// samples returns entries of every kind a set of that definition holds.
func samples(d firewall.SetDef) []firewall.Entry {
	a := func(s string) netip.Addr { return netip.MustParseAddr(s) }
	x, y, net := a("10.0.0.1"), a("10.1.0.7"), netip.MustParsePrefix("198.51.100.0/24")
	if d.Family == firewall.IPv6 {
		x, y, net = a("fd00::1"), a("fd01::7"), netip.MustParsePrefix("2001:db8:1::/48")
	}
	switch d.Type {
	case firewall.HashIP:
		return []firewall.Entry{{IP: x}, {IP: y}}
	case firewall.HashIPPort:
		es := []firewall.Entry{{IP: x, Proto: model.TCP, Port: 80}, {IP: x, Proto: model.UDP, Port: 53}, {IP: y, Proto: model.SCTP, Port: 9}}
		if d.SkbInfo {
			// Marks with every byte distinct, the highest bit included: byte order shows.
			for i := range es {
				es[i].Mark = 0x81020304 + uint32(i)<<8
			}
		}
		return es
	case firewall.HashIPPortIP:
		return []firewall.Entry{{IP: x, Proto: model.TCP, Port: 80, IP2: y}, {IP: y, Proto: model.UDP, Port: 53, IP2: y}}
	case firewall.HashIPPortNet:
		return []firewall.Entry{{IP: x, Proto: model.TCP, Port: 80, Net: net}, {IP: x, Proto: model.TCP, Port: 443, Net: netip.PrefixFrom(y, y.BitLen())}}
	case firewall.HashNet:
		return []firewall.Entry{{Net: net}, {Net: netip.PrefixFrom(x, x.BitLen()-4).Masked()}, {Net: netip.PrefixFrom(y, y.BitLen())}}
	case firewall.BitmapPort:
		return []firewall.Entry{{Port: 0}, {Port: 32000}, {Port: 65535}}
	}
	return nil
}

func entryStrings(es []firewall.Entry) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.String()
	}
	slices.Sort(out)
	return out
}

func headerOf(t *testing.T, k Kernel, n firewall.SetName) Header {
	t.Helper()
	hs, err := k.ListHeaders()
	if err != nil {
		t.Fatalf("ListHeaders: %v", err)
	}
	for _, h := range hs {
		if h.Name == n {
			return h
		}
	}
	t.Fatalf("set %s not listed", n)
	return Header{}
}

// Every set kube-ipvs defines can be created with its type, family and size, takes its
// kinds of entries (IPv4 and IPv6, TCP, UDP, SCTP, networks, ports) and lists them back, by
// netlink and by the ipset tool.
func testKernelEverySetType(t *testing.T) {
	k := newKernel(t)
	for _, d := range firewall.Sets(firewall.Config{}) {
		spec := specFor(d, 10000)
		if err := k.Create(spec); err != nil {
			t.Fatalf("create %s: %v", d.Name, err)
		}
		es := samples(d)
		for _, e := range es {
			if err := d.Check(e); err != nil {
				t.Fatalf("bad sample: %v", err)
			}
		}
		if err := k.Add(d.Name, es); err != nil {
			t.Fatalf("add to %s: %v", d.Name, err)
		}
		// Adding again and deleting what is absent are not errors (ipset -exist).
		if err := k.Add(d.Name, es[:1]); err != nil {
			t.Errorf("add existing to %s: %v", d.Name, err)
		}
		h := headerOf(t, k, d.Name)
		if h.Type != d.Type || h.Family != d.Family || h.Entries != uint32(len(es)) {
			t.Errorf("%s listed as %s %s with %d entries; want %s %s with %d", d.Name, h.Type, h.Family, h.Entries, d.Type, d.Family, len(es))
		}
		if d.Type == firewall.BitmapPort {
			if h.PortFrom != 0 || h.PortTo != 65535 {
				t.Errorf("%s range %d-%d", d.Name, h.PortFrom, h.PortTo)
			}
		} else if h.HashSize != 4096 || h.MaxElem != 65536 {
			t.Errorf("%s hashsize %d maxelem %d, want 4096 and 65536 for 10,000 entries", d.Name, h.HashSize, h.MaxElem)
		}
		got, err := ListEntries(k, d.Name)
		if err != nil {
			t.Fatalf("list %s: %v", d.Name, err)
		}
		if g, w := entryStrings(got), entryStrings(es); !slices.Equal(g, w) {
			t.Errorf("%s lists %v, want %v", d.Name, g, w)
		}
		tool := ipsetTool(t, "list", string(d.Name))
		for _, w := range entryStrings(es) {
			// The tool shows a host-length network as a plain address.
			w = strings.TrimSuffix(strings.TrimSuffix(w, "/32"), "/128")
			if !strings.Contains(tool, "\n"+w+"\n") {
				t.Errorf("ipset list %s lacks %s:\n%s", d.Name, w, tool)
			}
		}
		if err := k.Del(d.Name, append(es[:1:1], es[:1]...)); err != nil {
			t.Errorf("delete from %s (twice in one batch): %v", d.Name, err)
		}
		if got, _ := ListEntries(k, d.Name); len(got) != len(es)-1 {
			t.Errorf("%s has %d entries after one deletion, want %d", d.Name, len(got), len(es)-1)
		}
	}
}

// The kernel's answers map to the errors the reconciler relies on.
func testKernelErrors(t *testing.T) {
	k := newKernel(t)
	small := Spec{Name: "KIPVS-E", Type: firewall.HashIP, Family: firewall.IPv4, HashSize: 64, MaxElem: 4}
	if err := k.Create(small); err != nil {
		t.Fatal(err)
	}
	check := func(what string, err, want error) {
		t.Helper()
		if !errors.Is(err, want) {
			t.Errorf("%s: %v, want %v", what, err, want)
		}
	}
	check("create existing", k.Create(small), ErrSetExists)
	check("destroy missing", k.Destroy("KIPVS-NONE"), ErrSetNotFound)
	check("add to missing", k.Add("KIPVS-NONE", []firewall.Entry{{IP: netip.MustParseAddr("10.0.0.1")}}), ErrSetNotFound)
	check("list missing", func() error { _, err := ListEntries(k, "KIPVS-NONE"); return err }(), ErrSetNotFound)
	var six []firewall.Entry
	for i := range 6 {
		six = append(six, firewall.Entry{IP: netip.AddrFrom4([4]byte{10, 0, 0, byte(i)})})
	}
	check("add past maxelem", k.Add(small.Name, six), ErrSetFull)
	if h := headerOf(t, k, small.Name); h.Entries != 4 {
		t.Errorf("after a failed batch the set has %d entries; the kernel stops at the full one", h.Entries)
	}
	other := Spec{Name: "KIPVS-F", Type: firewall.HashIPPort, Family: firewall.IPv4, HashSize: 64, MaxElem: 4}
	if err := k.Create(other); err != nil {
		t.Fatal(err)
	}
	check("swap different types", k.Swap(small.Name, other.Name), ErrTypeMismatch)
	six6 := Spec{Name: "KIPVS-G", Type: firewall.HashIP, Family: firewall.IPv6, HashSize: 64, MaxElem: 4}
	if err := k.Create(six6); err != nil {
		t.Fatal(err)
	}
	check("swap different families", k.Swap(small.Name, six6.Name), ErrTypeMismatch)
	// A set referenced by iptables cannot go.
	ipsetTool(t, "create", "KIPVS-H", "hash:ip")
	rules := "*filter\n:KIPVS-REF - [0:0]\n-A KIPVS-REF -m set --match-set KIPVS-H src -j RETURN\nCOMMIT\n"
	cmd := exec.Command("iptables-nft-restore", "--noflush")
	cmd.Stdin = strings.NewReader(rules)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("iptables-nft-restore: %v\n%s", err, out)
	}
	check("destroy referenced", k.Destroy("KIPVS-H"), ErrSetInUse)
}

// The reconciler on the real kernel: Resync creates and fills, a second one writes nothing,
// Apply is incremental and batched, a set too small is rebuilt by swap while an iptables rule
// keeps referencing it, extra sets of ours go and other sets stay.
func testReconcilerOnKernel(t *testing.T) {
	k := newKernel(t)
	ipsetTool(t, "create", "KUBE-CLUSTER-IP", "hash:ip,port")
	ipsetTool(t, "create", "someone-else", "hash:ip")
	ipsetTool(t, "create", "KIPVS-LEFTOVER", "hash:ip")
	ipsetTool(t, "create", "KIPVS-T-VIPS", "hash:ip")

	cfg := firewall.Config{}
	defs := firewall.Sets(cfg)
	desired := map[firewall.SetName]map[firewall.Entry]bool{}
	for _, d := range defs {
		desired[d.Name] = map[firewall.Entry]bool{}
		for _, e := range samples(d) {
			desired[d.Name][e] = true
		}
	}
	r := New(k)
	res := r.Resync(defs, desired)
	if res.Err != nil || len(res.Errors) > 0 {
		t.Fatalf("Resync: %v %v", res.Err, res.Errors)
	}
	// One create and one batch per set, and the two leftovers destroyed.
	if want := 2*len(defs) + 2; res.Writes != want {
		t.Errorf("first Resync wrote %d times, want %d", res.Writes, want)
	}
	names := map[firewall.SetName]bool{}
	hs, _ := k.ListHeaders()
	for _, h := range hs {
		names[h.Name] = true
	}
	if names["KIPVS-LEFTOVER"] || names["KIPVS-T-VIPS"] || !names["KUBE-CLUSTER-IP"] || !names["someone-else"] {
		t.Errorf("sets after Resync: %v", names)
	}
	if res := r.Resync(defs, desired); res.Writes != 0 || res.Err != nil || len(res.Errors) > 0 {
		t.Errorf("second Resync: %+v", res)
	}

	// Incremental: 1,200 entries in three batches, then nothing, then one deletion.
	add := firewall.Changes{firewall.SetVIPs: {}}
	for i := range 1200 {
		add[firewall.SetVIPs][firewall.Entry{IP: netip.AddrFrom4([4]byte{10, 96, byte(i >> 8), byte(i)})}] = true
	}
	if res := r.Apply(add); res.Writes != 3 || len(res.Errors) > 0 {
		t.Errorf("Apply of 1,200 entries: %+v, want 3 writes", res)
	}
	if res := r.Apply(add); res.Writes != 0 {
		t.Errorf("Apply again: %d writes", res.Writes)
	}
	del := firewall.Changes{firewall.SetVIPs: {firewall.Entry{IP: netip.MustParseAddr("10.96.0.5")}: false}}
	if res := r.Apply(del); res.Writes != 1 || len(res.Errors) > 0 {
		t.Errorf("Apply of one deletion: %+v", res)
	}
	if h := headerOf(t, k, firewall.SetVIPs); h.Entries != 2+1200-1 {
		t.Errorf("%s has %d entries, want %d", firewall.SetVIPs, h.Entries, 2+1200-1)
	}
	if got, err := ListEntries(k, firewall.SetVIPs); err != nil || len(got) != 1201 {
		t.Errorf("listing a set over several dump messages: %d entries, %v", len(got), err)
	}
}

// A set that must grow past its maximum is rebuilt larger by swap: an iptables rule that
// references it keeps working on the same name, and the set never loses an entry.
func testRebuildBySwap(t *testing.T) {
	k := newKernel(t)
	d := firewall.SetDef{Name: "KIPVS-CLUSTER-IP", Type: firewall.HashIPPort, Family: firewall.IPv4}
	if err := k.Create(Spec{Name: d.Name, Type: d.Type, Family: d.Family, HashSize: 64, MaxElem: 8}); err != nil {
		t.Fatal(err)
	}
	rules := "*filter\n:KIPVS-REF - [0:0]\n-A KIPVS-REF -m set --match-set KIPVS-CLUSTER-IP dst,dst -j RETURN\nCOMMIT\n"
	cmd := exec.Command("iptables-nft-restore", "--noflush")
	cmd.Stdin = strings.NewReader(rules)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("iptables-nft-restore: %v\n%s", err, out)
	}
	entry := func(i int) firewall.Entry {
		return firewall.Entry{IP: netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}), Proto: model.TCP, Port: 80}
	}
	desired := map[firewall.SetName]map[firewall.Entry]bool{d.Name: {}}
	for i := range 6 {
		desired[d.Name][entry(i)] = true
	}
	r := New(k)
	if res := r.Resync([]firewall.SetDef{d}, desired); res.Writes != 1 || len(res.Errors) > 0 || res.Err != nil {
		t.Fatalf("Resync into the small set: %+v", res)
	}
	if h := headerOf(t, k, d.Name); h.MaxElem != 8 || h.References != 1 {
		t.Fatalf("before: maxelem %d references %d", h.MaxElem, h.References)
	}
	grow := firewall.Changes{d.Name: {}}
	for i := 6; i < 20; i++ {
		grow[d.Name][entry(i)] = true
	}
	res := r.Apply(grow)
	if len(res.Errors) > 0 || res.Writes != 4 { // create twin, fill, swap, destroy twin
		t.Fatalf("growing Apply: %+v", res)
	}
	h := headerOf(t, k, d.Name)
	if h.MaxElem != 65536 || h.HashSize < 1024 || h.Entries != 20 || h.References != 1 {
		t.Errorf("after: maxelem %d hashsize %d entries %d references %d; want 65536, >=1024, 20, 1", h.MaxElem, h.HashSize, h.Entries, h.References)
	}
	if _, err := ListEntries(k, firewall.TempName(d.Name)); !errors.Is(err, ErrSetNotFound) {
		t.Errorf("temporary twin left: %v", err)
	}
	out, err := exec.Command("iptables-nft-save", "-t", "filter").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--match-set KIPVS-CLUSTER-IP dst,dst") {
		t.Errorf("the rule no longer references the set: %v\n%s", err, out)
	}
	tool := ipsetTool(t, "list", "-t", string(d.Name))
	if !strings.Contains(tool, "maxelem 65536") || !strings.Contains(tool, "Number of entries: 20") {
		t.Errorf("ipset list -t:\n%s", tool)
	}

	// Resync of a set with the wrong type and no references: destroyed and re-created.
	ipsetTool(t, "create", "KIPVS-VIPS", "hash:net")
	v := firewall.SetDef{Name: "KIPVS-VIPS", Type: firewall.HashIP, Family: firewall.IPv4}
	res = r.Resync([]firewall.SetDef{d, v}, map[firewall.SetName]map[firewall.Entry]bool{
		d.Name: grow[d.Name], v.Name: {{IP: netip.MustParseAddr("10.96.0.1")}: true},
	})
	if res.Err != nil || len(res.Errors) > 0 {
		t.Fatalf("Resync: %+v", res)
	}
	if h := headerOf(t, k, v.Name); h.Type != firewall.HashIP || h.Entries != 1 {
		t.Errorf("%s is %s with %d entries", v.Name, h.Type, h.Entries)
	}
	// The first six entries were not desired any more.
	if h := headerOf(t, k, d.Name); h.Entries != 14 {
		t.Errorf("%s has %d entries, want 14", d.Name, h.Entries)
	}
}

// A set far beyond kube-proxy's fixed 65,536 entries (50,000 Services hold over half a
// million hairpin entries): it is created at the default size, grows by swap when an Apply
// overflows it, lists back in full through a dump of many netlink messages, is adopted by a
// new reconciler with no write, and a one-entry change stays one write.
func testLargeSetBeyondDefaultMaxElem(t *testing.T) {
	const n = 150_000 // more than twice 65,536: one growth is not enough for the default size
	k := newKernel(t)
	d := firewall.SetDef{Name: "KIPVS-CLUSTER-IP", Type: firewall.HashIPPort, Family: firewall.IPv4}
	entry := func(i int) firewall.Entry {
		return firewall.Entry{IP: netip.AddrFrom4([4]byte{10, byte(96 + i>>16), byte(i >> 8), byte(i)}), Proto: model.TCP, Port: 80}
	}
	r := New(k)
	if res := r.Resync([]firewall.SetDef{d}, nil); res.Err != nil || len(res.Errors) > 0 {
		t.Fatalf("Resync creating the empty set: %+v", res)
	}
	if h := headerOf(t, k, d.Name); h.MaxElem != 65536 {
		t.Fatalf("empty set created with maxelem %d, want 65536", h.MaxElem)
	}

	all := firewall.Changes{d.Name: {}}
	for i := range n {
		all[d.Name][entry(i)] = true
	}
	if res := r.Apply(all); res.Err != nil || len(res.Errors) > 0 {
		t.Fatalf("Apply of %d entries: %+v", n, res)
	}
	h := headerOf(t, k, d.Name)
	if h.Entries != n || h.MaxElem < n {
		t.Fatalf("after the Apply: %d entries, maxelem %d; want %d entries and room for them", h.Entries, h.MaxElem, n)
	}
	listed, err := ListEntries(k, d.Name)
	if err != nil {
		t.Fatalf("ListEntries of %d entries: %v", n, err)
	}
	seen := make(map[firewall.Entry]bool, len(listed))
	for _, e := range listed {
		seen[e] = true
	}
	if len(listed) != n || len(seen) != n || !seen[entry(0)] || !seen[entry(n-1)] {
		t.Fatalf("the dump lists %d entries (%d distinct), want %d including the first and the last", len(listed), len(seen), n)
	}
	// The listing's datagrams go into one reused buffer: what a listing allocates does not
	// grow with the set (the library's receive took 64 KiB per datagram, 6 MiB here).
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	count := 0
	if err := k.EachEntry(d.Name, func(firewall.Entry) { count++ }); err != nil || count != n {
		t.Fatalf("EachEntry: %d entries (%v), want %d", count, err, n)
	}
	runtime.ReadMemStats(&after)
	if got := after.TotalAlloc - before.TotalAlloc; got > 512<<10 {
		t.Errorf("listing %d entries allocated %d KiB, want at most 512", n, got>>10)
	}
	// A stepped check through a second handle, as a repair cycle runs it, keeps no copy of
	// the listing: the second check lists into the fingerprint buffer the first one sized
	// (a map of the listing took 10 MiB here, and the library's receive 6 MiB more).
	lister, err := NewKernel()
	if err != nil {
		t.Fatalf("NewKernel: %v", err)
	}
	t.Cleanup(lister.Close)
	r.Lister = lister
	check := func() Result {
		c, res := r.BeginCheck([]firewall.SetDef{d}, firewall.EntryMap(all))
		if res.Err != nil {
			t.Fatalf("BeginCheck: %v", res.Err)
		}
		wres := c.Wait()
		wres.Writes += res.Writes
		return wres
	}
	checkRes(t, check(), 0)
	runtime.ReadMemStats(&before)
	checkRes(t, check(), 0)
	runtime.ReadMemStats(&after)
	if got := after.TotalAlloc - before.TotalAlloc; got > 1<<20 {
		t.Errorf("a stepped check of %d entries allocated %d KiB, want at most 1024", n, got>>10)
	}
	r.Lister = nil

	if tool := ipsetTool(t, "list", "-t", string(d.Name)); !strings.Contains(tool, "Number of entries: 150000") {
		t.Errorf("ipset list -t:\n%s", tool)
	}

	// A restarted proxy adopts the set as it is.
	r2 := New(k)
	if res := r2.Resync([]firewall.SetDef{d}, map[firewall.SetName]map[firewall.Entry]bool(all)); res.Writes != 0 || res.Err != nil || len(res.Errors) > 0 {
		t.Fatalf("Resync of the intact set by a new reconciler: %+v, want 0 writes", res)
	}
	if res := r2.Apply(firewall.Changes{d.Name: {entry(7): false}}); res.Writes != 1 || len(res.Errors) > 0 {
		t.Fatalf("one removal: %+v, want 1 write", res)
	}
	if h := headerOf(t, k, d.Name); h.Entries != n-1 {
		t.Errorf("after one removal: %d entries, want %d", h.Entries, n-1)
	}
}

// A listing through a background handle parks at the foreground gate while it is up (and
// still lists every entry once it is lowered); one through the sync loop's own handle never
// parks, or a change's sync would wait for itself.
func testBackgroundListingParks(t *testing.T) {
	const n = 5_000 // many dump messages
	k := newKernel(t)
	gate := foreground.NewGateHolding(time.Hour) // parked until lowered, however slow the guest
	bg, err := NewBackgroundKernel(gate)
	if err != nil {
		t.Fatalf("NewBackgroundKernel: %v", err)
	}
	t.Cleanup(bg.Close)
	d := firewall.SetDef{Name: "KIPVS-CLUSTER-IP", Type: firewall.HashIPPort, Family: firewall.IPv4}
	r := New(k)
	all := firewall.Changes{d.Name: {}}
	for i := range n {
		all[d.Name][firewall.Entry{IP: netip.AddrFrom4([4]byte{10, 96, byte(i >> 8), byte(i)}), Proto: model.TCP, Port: 80}] = true
	}
	if res := r.Resync([]firewall.SetDef{d}, nil); res.Err != nil || len(res.Errors) > 0 {
		t.Fatalf("Resync: %+v", res)
	}
	if res := r.Apply(all); res.Err != nil || len(res.Errors) > 0 {
		t.Fatalf("Apply of %d entries: %+v", n, res)
	}
	t.Cleanup(gate.Lower)

	gate.Raise()
	before := gate.Parks()
	if es, err := ListEntries(k, d.Name); err != nil || len(es) != n {
		t.Fatalf("the loop's handle listed %d entries (%v), want %d", len(es), err, n)
	}
	if p := gate.Parks() - before; p != 0 {
		t.Fatalf("a listing through the loop's own handle parked %d times", p)
	}

	type listed struct {
		es  []firewall.Entry
		err error
	}
	out := make(chan listed, 1)
	go func() {
		es, err := ListEntries(bg, d.Name)
		out <- listed{es, err}
	}()
	for deadline := time.Now().Add(10 * time.Second); gate.Parks() == before; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("a background listing with the gate up never parked")
		}
	}
	gate.Lower()
	if l := <-out; l.err != nil || len(l.es) != n {
		t.Fatalf("the background listing got %d entries (%v), want %d", len(l.es), l.err, n)
	}
}

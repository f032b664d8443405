package dummyif

import (
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

const name = "kube-ipvs0"

var (
	v4a = netip.MustParseAddr("10.96.0.1")
	v4b = netip.MustParseAddr("10.96.0.2")
	v6a = netip.MustParseAddr("fd00:96::1")
	v6b = netip.MustParseAddr("fd00:96::2")
)

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }

func expectOps(t *testing.T, f *FakeNetlink, want ...string) {
	t.Helper()
	got := f.TakeOps()
	if len(got) == 0 && len(want) == 0 {
		return
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("netlink calls:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

func expectAddrs(t *testing.T, f *FakeNetlink, link string, want ...string) {
	t.Helper()
	if want == nil {
		want = []string{}
	}
	if got := f.Addrs(link); !reflect.DeepEqual(got, want) {
		t.Errorf("addresses of %s: %v, want %v", link, got, want)
	}
}

func expectClean(t *testing.T, res Result, writes int) {
	t.Helper()
	if res.Err != nil || len(res.Errors) != 0 {
		t.Errorf("unexpected errors: %v %v", res.Err, res.Errors)
	}
	if res.Writes != writes {
		t.Errorf("result counts %d writes, want %d", res.Writes, writes)
	}
}

func TestEnsureLinkCreatesOnceAndIsIdempotent(t *testing.T) {
	f := NewFakeNetlink()
	r := NewWithNetlink(name, f)
	if err := r.EnsureLink(); err != nil {
		t.Fatal(err)
	}
	expectOps(t, f, "link kube-ipvs0", "add-dummy kube-ipvs0", "link kube-ipvs0")
	if f.LinkType(name) != "dummy" || r.Writes() != 1 {
		t.Fatalf("link type %q, writes %d", f.LinkType(name), r.Writes())
	}
	if err := r.EnsureLink(); err != nil {
		t.Fatal(err)
	}
	expectOps(t, f, "link kube-ipvs0")
	if r.Writes() != 1 {
		t.Errorf("second EnsureLink wrote: %d writes", r.Writes())
	}
}

func TestRefusesALinkThatIsNotADummy(t *testing.T) {
	f := NewFakeNetlink()
	f.PutLink(name, "veth")
	f.PutAddr(name, pfx("10.96.0.9/32"), 0)
	r := NewWithNetlink(name, f)
	if err := r.EnsureLink(); !errors.Is(err, ErrNotDummy) {
		t.Fatalf("EnsureLink on a veth: %v, want ErrNotDummy", err)
	}
	if res := r.Apply([]netip.Addr{v4a}, nil); !errors.Is(res.Err, ErrNotDummy) || res.Writes != 0 {
		t.Errorf("Apply on a veth: %+v", res)
	}
	if res := resync(r, map[netip.Addr]bool{v4a: true}); !errors.Is(res.Err, ErrNotDummy) || res.Writes != 0 {
		t.Errorf("repair on a veth: %+v", res)
	}
	expectOps(t, f, "link kube-ipvs0", "link kube-ipvs0", "link kube-ipvs0")
	expectAddrs(t, f, name, "10.96.0.9/32")
	if f.LinkType(name) != "veth" {
		t.Error("the veth was replaced")
	}
}

func TestApplyIsIncremental(t *testing.T) {
	f := NewFakeNetlink()
	r := NewWithNetlink(name, f)
	if err := r.EnsureLink(); err != nil {
		t.Fatal(err)
	}
	f.TakeOps()

	expectClean(t, r.Apply([]netip.Addr{v6a, v4a}, nil), 2)
	expectOps(t, f, "addr-add 2 10.96.0.1/32 flags=0x0", "addr-add 2 fd00:96::1/128 flags=0x2")
	expectAddrs(t, f, name, "10.96.0.1/32", "fd00:96::1/128 flags=0x2")

	// Already bound, or not bound: no call at all.
	expectClean(t, r.Apply([]netip.Addr{v4a, v6a}, []netip.Addr{v4b, v6b}), 0)
	expectOps(t, f)

	// Binds come before unbinds.
	expectClean(t, r.Apply([]netip.Addr{v4a, v4b}, []netip.Addr{v6a}), 2)
	expectOps(t, f, "addr-add 2 10.96.0.2/32 flags=0x0", "addr-del 2 fd00:96::1/128")
	if got := r.Addresses(); !reflect.DeepEqual(got, []netip.Addr{v4a, v4b}) {
		t.Errorf("Addresses() = %v", got)
	}
	if r.Writes() != 5 {
		t.Errorf("Writes() = %d, want 5", r.Writes())
	}
}

func TestApplyLooksTheLinkUpOnceWithoutEnsureLink(t *testing.T) {
	f := NewFakeNetlink()
	f.PutLink(name, "dummy")
	r := NewWithNetlink(name, f)
	expectClean(t, r.Apply([]netip.Addr{v4a}, nil), 1)
	expectClean(t, r.Apply([]netip.Addr{v4b}, nil), 1)
	expectOps(t, f, "link kube-ipvs0", "addr-add 2 10.96.0.1/32 flags=0x0", "addr-add 2 10.96.0.2/32 flags=0x0")

	f.DeleteLink(name)
	if res := NewWithNetlink(name, f).Apply([]netip.Addr{v4a}, nil); !errors.Is(res.Err, ErrLinkNotFound) {
		t.Errorf("Apply without the link: %+v", res)
	}
	if f.LinkType(name) != "" {
		t.Error("Apply created the link")
	}
}

func TestApplyRejectsBadInput(t *testing.T) {
	f := NewFakeNetlink()
	r := NewWithNetlink(name, f)
	_ = r.EnsureLink()
	f.TakeOps()
	mapped := netip.MustParseAddr("::ffff:10.96.0.3")
	res := r.Apply([]netip.Addr{v4a, {}, mapped}, []netip.Addr{v4a})
	if len(res.Errors) != 3 || res.Errors[v4a] == nil || res.Errors[mapped] == nil {
		t.Errorf("errors %v, want 3", res.Errors)
	}
	expectOps(t, f)
}

func TestApplyFailureIsPerAddressAndRetried(t *testing.T) {
	f := NewFakeNetlink()
	r := NewWithNetlink(name, f)
	_ = r.EnsureLink()
	f.TakeOps()
	boom := errors.New("injected")
	failed := false
	f.Fail = func(op, arg string) error {
		if op == "addr-add" && arg == "10.96.0.1/32" && !failed {
			failed = true
			return boom
		}
		return nil
	}
	res := r.Apply([]netip.Addr{v4a, v4b, v6a}, nil)
	if len(res.Errors) != 1 || !errors.Is(res.Errors[v4a], boom) || res.Writes != 3 {
		t.Fatalf("result %+v, want only %s failed after 3 writes", res, v4a)
	}
	expectAddrs(t, f, name, "10.96.0.2/32", "fd00:96::1/128 flags=0x2")
	f.TakeOps()
	// The failure makes the next Apply check the link again, then retry just that address.
	expectClean(t, r.Apply([]netip.Addr{v4a, v4b, v6a}, nil), 1)
	expectOps(t, f, "link kube-ipvs0", "addr-add 2 10.96.0.1/32 flags=0x0")
}

func TestLinkRecreatedBehindOurBack(t *testing.T) {
	f := NewFakeNetlink()
	r := NewWithNetlink(name, f)
	_ = r.EnsureLink()
	r.Apply([]netip.Addr{v4a}, nil)
	f.DeleteLink(name)
	f.PutLink(name, "dummy") // a new index, no addresses
	f.TakeOps()

	res := r.Apply([]netip.Addr{v4b}, nil)
	if res.Errors[v4b] == nil {
		t.Fatalf("writing to the vanished link did not fail: %+v", res)
	}
	// The next Apply finds the new link and forgets what the old one had.
	expectClean(t, r.Apply([]netip.Addr{v4a, v4b}, nil), 2)
	expectAddrs(t, f, name, "10.96.0.1/32", "10.96.0.2/32")
}

func TestResyncCreatesTheLink(t *testing.T) {
	f := NewFakeNetlink()
	r := NewWithNetlink(name, f)
	expectClean(t, resync(r, map[netip.Addr]bool{v4a: true, v6a: true, v4b: false}), 3)
	expectOps(t, f,
		"link kube-ipvs0", "add-dummy kube-ipvs0", "link kube-ipvs0",
		"addr-list 2",
		"route-list 2", // the first listing repair looks for VIPs bound as routes, to convert them
		"addr-add 2 10.96.0.1/32 flags=0x0",
		"addr-add 2 fd00:96::1/128 flags=0x2")
	expectAddrs(t, f, name, "10.96.0.1/32", "fd00:96::1/128 flags=0x2")
}

func TestResyncRepairsOnlyThisLink(t *testing.T) {
	f := NewFakeNetlink()
	f.PutLink("eth0", "veth")
	f.PutAddr("eth0", pfx("10.96.9.9/32"), 0)
	f.PutLink(name, "dummy")
	f.PutAddr(name, pfx("10.96.0.1/32"), 0)                      // right
	f.PutAddr(name, pfx("10.96.9.9/32"), 0)                      // extra
	f.PutAddr(name, pfx("10.96.0.2/24"), 0)                      // desired, wrong prefix
	f.PutAddr(name, pfx("fd00:96::1/128"), unix.IFA_F_TENTATIVE) // desired, unusable
	f.PutAddr(name, pfx("fd00:96::9/128"), unix.IFA_F_NODAD)     // extra
	f.PutAddr(name, pfx("fe80::1/64"), 0)                        // the kernel's, left alone
	r := NewWithNetlink(name, f)

	desired := map[netip.Addr]bool{v4a: true, v4b: true, v6a: true, v6b: true}
	expectClean(t, resync(r, desired), 7)
	expectOps(t, f,
		"link kube-ipvs0",
		"addr-list 3",
		"route-list 3",
		"addr-del 3 10.96.0.2/24",
		"addr-del 3 fd00:96::1/128",
		"addr-add 3 10.96.0.2/32 flags=0x0",
		"addr-add 3 fd00:96::1/128 flags=0x2",
		"addr-add 3 fd00:96::2/128 flags=0x2",
		"addr-del 3 10.96.9.9/32",
		"addr-del 3 fd00:96::9/128",
	)
	expectAddrs(t, f, name, "10.96.0.1/32", "10.96.0.2/32", "fd00:96::1/128 flags=0x2", "fd00:96::2/128 flags=0x2", "fe80::1/64")
	expectAddrs(t, f, "eth0", "10.96.9.9/32")
	if got := r.Addresses(); !reflect.DeepEqual(got, []netip.Addr{v4a, v4b, v6a, v6b}) {
		t.Errorf("Addresses() = %v", got)
	}

	// Right already: a listing and nothing else.
	expectClean(t, resync(r, desired), 0)
	expectOps(t, f, "link kube-ipvs0", "addr-list 3")
	// And the cache it rebuilt makes the next Apply free.
	expectClean(t, r.Apply([]netip.Addr{v4a, v6b}, []netip.Addr{netip.MustParseAddr("10.96.9.9")}), 0)
	expectOps(t, f)
	if r.Writes() != 7 {
		t.Errorf("Writes() = %d, want 7", r.Writes())
	}
}

func TestResyncDoesNotTrustAnInterruptedListing(t *testing.T) {
	f := NewFakeNetlink()
	f.PutLink(name, "dummy")
	f.PutAddr(name, pfx("10.96.9.9/32"), 0)
	r := NewWithNetlink(name, f)
	f.Fail = func(op, _ string) error {
		if op == "addr-list" {
			return ErrDumpInterrupted
		}
		return nil
	}
	res := resync(r, map[netip.Addr]bool{v4a: true})
	if !errors.Is(res.Err, ErrDumpInterrupted) || res.Writes != 0 {
		t.Fatalf("repair over an interrupted listing: %+v", res)
	}
	expectOps(t, f, "link kube-ipvs0", "addr-list 2", "addr-list 2", "addr-list 2")
	expectAddrs(t, f, name, "10.96.9.9/32")

	// One interruption is retried and the second listing trusted.
	n := 0
	f.Fail = func(op, _ string) error {
		if op == "addr-list" && n == 0 {
			n++
			return ErrDumpInterrupted
		}
		return nil
	}
	expectClean(t, resync(r, map[netip.Addr]bool{v4a: true}), 2)
	expectAddrs(t, f, name, "10.96.0.1/32")
}

// A listing repair tells, once and before writing, what the link had; nil when it could not be
// listed.
func TestRepairTellsWhatTheLinkHadBeforeWriting(t *testing.T) {
	f := NewFakeNetlink()
	f.PutLink(name, "dummy")
	f.PutAddr(name, pfx("10.96.9.9/32"), 0)
	r := NewWithNetlink(name, f)
	calls := 0
	var got map[netip.Addr]bool
	res := r.Repair(WantAll(map[netip.Addr]bool{v4a: true}), nil, func(m map[netip.Addr]bool) {
		calls++
		got = m
		expectAddrs(t, f, name, "10.96.9.9/32") // nothing written yet
	})
	expectClean(t, res, 2)
	if calls != 1 || !reflect.DeepEqual(got, map[netip.Addr]bool{netip.MustParseAddr("10.96.9.9"): true}) {
		t.Errorf("found called %d times with %v, want once with 10.96.9.9", calls, got)
	}
	expectAddrs(t, f, name, "10.96.0.1/32")

	f.Fail = func(op, _ string) error {
		if op == "addr-list" {
			return errors.New("listing refused")
		}
		return nil
	}
	calls, got = 0, map[netip.Addr]bool{}
	res = r.Repair(WantAll(map[netip.Addr]bool{v4a: true}), nil, func(m map[netip.Addr]bool) { calls++; got = m })
	if res.Err == nil || calls != 1 || got != nil {
		t.Errorf("failed listing: err %v, found called %d times with %v; want an error and one call with nil", res.Err, calls, got)
	}
}

// resync is the repair from a listing of the link, of the addresses desired maps to true.
func resync(r *Reconciler, desired map[netip.Addr]bool) Result {
	return r.Repair(WantAll(desired), nil, nil)
}

package ipset

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kube-ipvs/kube-ipvs/firewall"
	"github.com/kube-ipvs/kube-ipvs/model"
)

var (
	defIPPort = firewall.SetDef{Name: "KIPVS-CLUSTER-IP", Type: firewall.HashIPPort, Family: firewall.IPv4}
	defVIPs6  = firewall.SetDef{Name: "KIPVS-VIPS-6", Type: firewall.HashIP, Family: firewall.IPv6}
	defPorts  = firewall.SetDef{Name: "KIPVS-HEALTH-CHECK-NODE-PORT", Type: firewall.BitmapPort, PortFrom: 0, PortTo: 65535}
	testDefs  = []firewall.SetDef{defIPPort, defVIPs6, defPorts}
)

func ipp(s string, port uint16) firewall.Entry {
	return firewall.Entry{IP: netip.MustParseAddr(s), Proto: model.TCP, Port: port}
}
func ip(s string) firewall.Entry   { return firewall.Entry{IP: netip.MustParseAddr(s)} }
func port(p uint16) firewall.Entry { return firewall.Entry{Port: p} }

func want(pairs ...any) map[firewall.SetName]map[firewall.Entry]bool {
	m := map[firewall.SetName]map[firewall.Entry]bool{}
	for i := 0; i < len(pairs); i += 2 {
		n := pairs[i].(firewall.SetName)
		if m[n] == nil {
			m[n] = map[firewall.Entry]bool{}
		}
		m[n][pairs[i+1].(firewall.Entry)] = true
	}
	return m
}

// members packs set and entry pairs as firewall.AppendMembers does, for
// Tracker.UpdateMembers.
func members(pairs ...any) []firewall.Member {
	var ms []firewall.Member
	for i := 0; i < len(pairs); i += 2 {
		ms = append(ms, firewall.Member{Set: firewall.IDOf(pairs[i].(firewall.SetName)), Entry: pairs[i+1].(firewall.Entry).Pack()})
	}
	return ms
}

func changes(add bool, pairs ...any) firewall.Changes {
	c := firewall.Changes{}
	for n, es := range want(pairs...) {
		c[n] = map[firewall.Entry]bool{}
		for e := range es {
			c[n][e] = add
		}
	}
	return c
}

func checkOps(t *testing.T, f *FakeKernel, want ...string) {
	t.Helper()
	if got := f.TakeOps(); !slices.Equal(got, want) {
		t.Errorf("kernel calls:\n  got  %s\n  want %s", strings.Join(got, "\n       "), strings.Join(want, "\n       "))
	}
}

func checkRes(t *testing.T, res Result, writes int) {
	t.Helper()
	if res.Err != nil || len(res.Errors) > 0 {
		t.Errorf("result errors: %v %v", res.Err, res.Errors)
	}
	if res.Writes != writes {
		t.Errorf("Writes = %d, want %d", res.Writes, writes)
	}
}

func checkSet(t *testing.T, f *FakeKernel, n firewall.SetName, want ...string) {
	t.Helper()
	_, got, ok := f.Get(n)
	if !ok {
		t.Fatalf("set %s does not exist", n)
	}
	if !slices.Equal(got, want) {
		t.Errorf("%s holds %v, want %v", n, got, want)
	}
}

func TestResyncCreatesFillsAndThenWritesNothing(t *testing.T) {
	f := NewFakeKernel()
	r := New(f)
	d := want(defIPPort.Name, ipp("10.0.0.2", 80), defIPPort.Name, ipp("10.0.0.1", 80),
		defVIPs6.Name, ip("fd00::1"), defPorts.Name, port(32000))
	checkRes(t, r.Resync(testDefs, d), 6)
	checkOps(t, f,
		"list-headers",
		"create KIPVS-CLUSTER-IP hash:ip,port inet hashsize 1024 maxelem 65536",
		"add KIPVS-CLUSTER-IP 10.0.0.1,tcp:80 10.0.0.2,tcp:80",
		"create KIPVS-VIPS-6 hash:ip inet6 hashsize 1024 maxelem 65536",
		"add KIPVS-VIPS-6 fd00::1",
		"create KIPVS-HEALTH-CHECK-NODE-PORT bitmap:port any range 0-65535",
		"add KIPVS-HEALTH-CHECK-NODE-PORT 32000",
	)
	checkSet(t, f, defIPPort.Name, "10.0.0.1,tcp:80", "10.0.0.2,tcp:80")

	// The kernel matches: a Resync only reads.
	checkRes(t, r.Resync(testDefs, d), 0)
	checkOps(t, f, "list-headers", "list KIPVS-CLUSTER-IP", "list KIPVS-VIPS-6", "list KIPVS-HEALTH-CHECK-NODE-PORT")

	// A restarted proxy (new Reconciler) adopts the sets without writing.
	r2 := New(f)
	checkRes(t, r2.Resync(testDefs, d), 0)
	f.TakeOps()
	checkRes(t, r2.Apply(changes(true, defIPPort.Name, ipp("10.0.0.1", 80))), 0)
	checkOps(t, f)
}

func TestApplyIsIncrementalAndBatched(t *testing.T) {
	f := NewFakeKernel()
	r := New(f)
	r.BatchSize = 2
	checkRes(t, r.Resync(testDefs, nil), 3)
	f.TakeOps()

	res := r.Apply(changes(true, defIPPort.Name, ipp("10.0.0.1", 80), defIPPort.Name, ipp("10.0.0.2", 80),
		defIPPort.Name, ipp("10.0.0.3", 80), defVIPs6.Name, ip("fd00::1")))
	checkRes(t, res, 3)
	checkOps(t, f,
		"add KIPVS-CLUSTER-IP 10.0.0.1,tcp:80 10.0.0.2,tcp:80",
		"add KIPVS-CLUSTER-IP 10.0.0.3,tcp:80",
		"add KIPVS-VIPS-6 fd00::1")

	// Applying it again costs nothing; neither does deleting what is absent.
	checkRes(t, r.Apply(changes(true, defIPPort.Name, ipp("10.0.0.1", 80))), 0)
	checkRes(t, r.Apply(changes(false, defIPPort.Name, ipp("10.9.9.9", 80))), 0)
	checkOps(t, f)

	// Additions come before deletions, whatever the set order.
	c := changes(false, defIPPort.Name, ipp("10.0.0.1", 80))
	c[defVIPs6.Name] = map[firewall.Entry]bool{ip("fd00::2"): true}
	checkRes(t, r.Apply(c), 2)
	checkOps(t, f, "add KIPVS-VIPS-6 fd00::2", "del KIPVS-CLUSTER-IP 10.0.0.1,tcp:80")
	checkSet(t, f, defIPPort.Name, "10.0.0.2,tcp:80", "10.0.0.3,tcp:80")
	if n := r.Count(defIPPort.Name); n != 2 {
		t.Errorf("Count = %d", n)
	}
	if r.Writes() != 8 {
		t.Errorf("Writes() = %d, want 8", r.Writes())
	}
}

func TestApplyRejectsBadInput(t *testing.T) {
	f := NewFakeKernel()
	r := New(f)
	res := r.Apply(changes(true, defIPPort.Name, ipp("10.0.0.1", 80)))
	if res.Errors[defIPPort.Name] == nil || res.Writes != 0 {
		t.Errorf("Apply before Resync: %+v", res)
	}
	r.Resync(testDefs, nil)
	f.TakeOps()
	res = r.Apply(changes(true, defIPPort.Name, ipp("fd00::1", 80), defVIPs6.Name, ip("fd00::1")))
	if res.Errors[defIPPort.Name] == nil || len(res.Errors) != 1 {
		t.Errorf("an IPv6 entry in an IPv4 set: %v", res.Errors)
	}
	checkOps(t, f, "add KIPVS-VIPS-6 fd00::1")
	res = r.Apply(changes(true, firewall.SetName("KIPVS-NOT-DEFINED"), ip("10.0.0.1")))
	if res.Errors["KIPVS-NOT-DEFINED"] == nil {
		t.Error("an undefined set is accepted")
	}
}

// A set that must grow past its maximum is rebuilt bigger in a temporary twin and swapped
// in: the rules keep the name and never see a partly filled set.
func TestApplyGrowsSetBySwap(t *testing.T) {
	f := NewFakeKernel()
	f.Put(Spec{Name: defIPPort.Name, Type: firewall.HashIPPort, Family: firewall.IPv4, HashSize: 64, MaxElem: 3},
		ipp("10.0.0.1", 80), ipp("10.0.0.2", 80))
	f.SetReferences(defIPPort.Name, 2)
	r := New(f)
	checkRes(t, r.Resync([]firewall.SetDef{defIPPort}, want(defIPPort.Name, ipp("10.0.0.1", 80), defIPPort.Name, ipp("10.0.0.2", 80))), 0)
	f.TakeOps()

	checkRes(t, r.Apply(changes(true, defIPPort.Name, ipp("10.0.0.3", 80), defIPPort.Name, ipp("10.0.0.4", 80))), 4)
	checkOps(t, f,
		"create KIPVS-T-CLUSTER-IP hash:ip,port inet hashsize 1024 maxelem 65536",
		"add KIPVS-T-CLUSTER-IP 10.0.0.1,tcp:80 10.0.0.2,tcp:80 10.0.0.3,tcp:80 10.0.0.4,tcp:80",
		"swap KIPVS-CLUSTER-IP KIPVS-T-CLUSTER-IP",
		"destroy KIPVS-T-CLUSTER-IP",
	)
	checkSet(t, f, defIPPort.Name, "10.0.0.1,tcp:80", "10.0.0.2,tcp:80", "10.0.0.3,tcp:80", "10.0.0.4,tcp:80")
	if s, _ := r.Spec(defIPPort.Name); s.MaxElem != 65536 {
		t.Errorf("cached maxelem %d", s.MaxElem)
	}
	if names := f.Names(); len(names) != 1 {
		t.Errorf("sets left: %v", names)
	}
}

// The kernel saying "full" (someone else filled it, or it was sized by hand) also rebuilds.
func TestApplyRebuildsWhenKernelSaysFull(t *testing.T) {
	f := NewFakeKernel()
	r := New(f)
	r.Resync([]firewall.SetDef{defIPPort}, want(defIPPort.Name, ipp("10.0.0.1", 80)))
	f.TakeOps()
	full := true
	f.Fail = func(op string, n firewall.SetName) error {
		if op == "add" && n == defIPPort.Name && full {
			full = false
			return ErrSetFull
		}
		return nil
	}
	checkRes(t, r.Apply(changes(true, defIPPort.Name, ipp("10.0.0.2", 80))), 5)
	checkOps(t, f,
		"add KIPVS-CLUSTER-IP 10.0.0.2,tcp:80",
		"create KIPVS-T-CLUSTER-IP hash:ip,port inet hashsize 1024 maxelem 65536",
		"add KIPVS-T-CLUSTER-IP 10.0.0.1,tcp:80 10.0.0.2,tcp:80",
		"swap KIPVS-CLUSTER-IP KIPVS-T-CLUSTER-IP",
		"destroy KIPVS-T-CLUSTER-IP")
}

func TestResyncRepairsDriftAndTouchesOnlyOwnSets(t *testing.T) {
	f := NewFakeKernel()
	ipport := Spec{Name: defIPPort.Name, Type: firewall.HashIPPort, Family: firewall.IPv4, HashSize: 1024, MaxElem: 65536}
	f.Put(ipport, ipp("10.0.0.1", 80), ipp("10.0.0.9", 80))
	f.Put(Spec{Name: "KIPVS-T-CLUSTER-IP", Type: firewall.HashIPPort, Family: firewall.IPv4, HashSize: 1024, MaxElem: 65536})
	f.Put(Spec{Name: "KIPVS-OLD-SET", Type: firewall.HashIP, Family: firewall.IPv4, HashSize: 1024, MaxElem: 65536})
	f.Put(Spec{Name: "KUBE-CLUSTER-IP", Type: firewall.HashIPPort, Family: firewall.IPv4, HashSize: 1024, MaxElem: 65536}, ipp("10.0.0.1", 80))
	f.Put(Spec{Name: "other", Type: firewall.HashIP, Family: firewall.IPv4, HashSize: 1024, MaxElem: 65536}, ip("1.2.3.4"))
	r := New(f)
	res := r.Resync([]firewall.SetDef{defIPPort}, want(defIPPort.Name, ipp("10.0.0.1", 80), defIPPort.Name, ipp("10.0.0.2", 80)))
	checkRes(t, res, 4)
	checkOps(t, f,
		"list-headers",
		"list KIPVS-CLUSTER-IP",
		"add KIPVS-CLUSTER-IP 10.0.0.2,tcp:80",
		"del KIPVS-CLUSTER-IP 10.0.0.9,tcp:80",
		"destroy KIPVS-OLD-SET",
		"destroy KIPVS-T-CLUSTER-IP")
	if got := f.Names(); !slices.Equal(got, []firewall.SetName{"KIPVS-CLUSTER-IP", "KUBE-CLUSTER-IP", "other"}) {
		t.Errorf("sets after Resync: %v", got)
	}
	checkSet(t, f, "KUBE-CLUSTER-IP", "10.0.0.1,tcp:80")
}

func TestResyncRebuildsWrongSetsBySwap(t *testing.T) {
	f := NewFakeKernel()
	// Too small for its content, and a bitmap with the wrong range.
	f.Put(Spec{Name: defIPPort.Name, Type: firewall.HashIPPort, Family: firewall.IPv4, HashSize: 64, MaxElem: 1}, ipp("10.0.0.9", 80))
	f.Put(Spec{Name: defPorts.Name, Type: firewall.BitmapPort, PortFrom: 30000, PortTo: 32767}, port(30001))
	f.SetReferences(defIPPort.Name, 1)
	r := New(f)
	d := want(defIPPort.Name, ipp("10.0.0.1", 80), defIPPort.Name, ipp("10.0.0.2", 80), defPorts.Name, port(80))
	checkRes(t, r.Resync([]firewall.SetDef{defIPPort, defPorts}, d), 8)
	checkOps(t, f,
		"list-headers",
		"create KIPVS-T-CLUSTER-IP hash:ip,port inet hashsize 1024 maxelem 65536",
		"add KIPVS-T-CLUSTER-IP 10.0.0.1,tcp:80 10.0.0.2,tcp:80",
		"swap KIPVS-CLUSTER-IP KIPVS-T-CLUSTER-IP",
		"destroy KIPVS-T-CLUSTER-IP",
		"create KIPVS-T-HEALTH-CHECK-NODE-PORT bitmap:port any range 0-65535",
		"add KIPVS-T-HEALTH-CHECK-NODE-PORT 80",
		"swap KIPVS-HEALTH-CHECK-NODE-PORT KIPVS-T-HEALTH-CHECK-NODE-PORT",
		"destroy KIPVS-T-HEALTH-CHECK-NODE-PORT")
	checkSet(t, f, defIPPort.Name, "10.0.0.1,tcp:80", "10.0.0.2,tcp:80")
	checkSet(t, f, defPorts.Name, "80")
}

func TestResyncChangesTypeOnlyWhenUnreferenced(t *testing.T) {
	f := NewFakeKernel()
	f.Put(Spec{Name: defIPPort.Name, Type: firewall.HashIP, Family: firewall.IPv4, HashSize: 1024, MaxElem: 65536}, ip("10.0.0.1"))
	f.SetReferences(defIPPort.Name, 1)
	r := New(f)
	d := want(defIPPort.Name, ipp("10.0.0.1", 80))
	res := r.Resync([]firewall.SetDef{defIPPort}, d)
	if !errors.Is(res.Errors[defIPPort.Name], ErrSetInUse) {
		t.Errorf("type change of a referenced set: %v", res.Errors)
	}
	if _, _, ok := f.Get("KIPVS-T-CLUSTER-IP"); ok {
		t.Error("temporary set left behind")
	}
	f.SetReferences(defIPPort.Name, 0)
	f.TakeOps()
	checkRes(t, r.Resync([]firewall.SetDef{defIPPort}, d), 7)
	checkOps(t, f,
		"list-headers",
		"create KIPVS-T-CLUSTER-IP hash:ip,port inet hashsize 1024 maxelem 65536",
		"add KIPVS-T-CLUSTER-IP 10.0.0.1,tcp:80",
		"swap KIPVS-CLUSTER-IP KIPVS-T-CLUSTER-IP",
		"destroy KIPVS-T-CLUSTER-IP",
		"destroy KIPVS-CLUSTER-IP",
		"create KIPVS-CLUSTER-IP hash:ip,port inet hashsize 1024 maxelem 65536",
		"add KIPVS-CLUSTER-IP 10.0.0.1,tcp:80")
	checkSet(t, f, defIPPort.Name, "10.0.0.1,tcp:80")
}

// A failed batch is retried entry by entry: the error names the entry, the cache holds
// exactly what was written, and the same Apply again retries only the failed entry.
func TestApplyFailedBatchRetriesPerEntry(t *testing.T) {
	f := NewFakeKernel()
	r := New(f)
	r.Resync([]firewall.SetDef{defIPPort}, nil)
	f.TakeOps()
	calls := 0
	f.Fail = func(op string, n firewall.SetName) error {
		if op == "add" {
			calls++
			if calls == 1 || calls == 3 { // the batch, then the second entry alone
				return errors.New("ENOMEM")
			}
		}
		return nil
	}
	c := changes(true, defIPPort.Name, ipp("10.0.0.1", 80), defIPPort.Name, ipp("10.0.0.2", 80), defIPPort.Name, ipp("10.0.0.3", 80))
	res := r.Apply(c)
	if err := res.Errors[defIPPort.Name]; err == nil || !strings.Contains(err.Error(), "10.0.0.2,tcp:80") {
		t.Errorf("error %v does not name the failed entry", err)
	}
	checkOps(t, f,
		"add KIPVS-CLUSTER-IP 10.0.0.1,tcp:80 10.0.0.2,tcp:80 10.0.0.3,tcp:80",
		"add KIPVS-CLUSTER-IP 10.0.0.1,tcp:80",
		"add KIPVS-CLUSTER-IP 10.0.0.2,tcp:80",
		"add KIPVS-CLUSTER-IP 10.0.0.3,tcp:80")
	checkRes(t, r.Apply(c), 1)
	checkOps(t, f, "add KIPVS-CLUSTER-IP 10.0.0.2,tcp:80")
	checkSet(t, f, defIPPort.Name, "10.0.0.1,tcp:80", "10.0.0.2,tcp:80", "10.0.0.3,tcp:80")
}

// Someone destroyed a set (no rule referenced it): the next Apply re-creates it whole.
func TestApplyRecreatesVanishedSet(t *testing.T) {
	f := NewFakeKernel()
	r := New(f)
	r.Resync([]firewall.SetDef{defIPPort}, want(defIPPort.Name, ipp("10.0.0.1", 80)))
	f.Remove(defIPPort.Name)
	f.TakeOps()
	res := r.Apply(changes(true, defIPPort.Name, ipp("10.0.0.2", 80)))
	checkRes(t, res, 3)
	checkOps(t, f,
		"add KIPVS-CLUSTER-IP 10.0.0.2,tcp:80",
		"create KIPVS-CLUSTER-IP hash:ip,port inet hashsize 1024 maxelem 65536",
		"add KIPVS-CLUSTER-IP 10.0.0.1,tcp:80 10.0.0.2,tcp:80")
	f.Remove(defIPPort.Name)
	f.TakeOps()
	checkRes(t, r.Apply(changes(false, defIPPort.Name, ipp("10.0.0.2", 80))), 3)
	checkSet(t, f, defIPPort.Name, "10.0.0.1,tcp:80")
}

func TestResyncListFailures(t *testing.T) {
	f := NewFakeKernel()
	r := New(f)
	n := 0
	f.Fail = func(op string, _ firewall.SetName) error {
		if op == "list-headers" {
			n++
			if n <= 2 {
				return fmt.Errorf("dump: %w", ErrDumpInterrupted)
			}
		}
		return nil
	}
	checkRes(t, r.Resync([]firewall.SetDef{defIPPort}, nil), 1)
	f.Fail = func(op string, _ firewall.SetName) error {
		if op == "list-headers" {
			return errors.New("EPERM")
		}
		return nil
	}
	f.TakeOps()
	res := r.Resync([]firewall.SetDef{defIPPort}, nil)
	if res.Err == nil || res.Writes != 0 {
		t.Errorf("failed listing: %+v", res)
	}
	checkOps(t, f, "list-headers")
}

func TestCleanupDestroysOnlyOwnSets(t *testing.T) {
	f := NewFakeKernel()
	r := New(f)
	r.Resync(testDefs, nil)
	f.Put(Spec{Name: "KUBE-X", Type: firewall.HashIP, Family: firewall.IPv4, HashSize: 1024, MaxElem: 65536})
	f.SetReferences(defVIPs6.Name, 1)
	res := r.Cleanup()
	if !errors.Is(res.Errors[defVIPs6.Name], ErrSetInUse) || len(res.Errors) != 1 {
		t.Errorf("Cleanup errors %v", res.Errors)
	}
	if got := f.Names(); !slices.Equal(got, []firewall.SetName{"KIPVS-VIPS-6", "KUBE-X"}) {
		t.Errorf("sets after Cleanup: %v", got)
	}
}

func TestSize(t *testing.T) {
	cases := []struct {
		n              int
		hash, maxElems uint32
	}{
		{0, 1024, 65536},
		{4096, 1024, 65536},
		{4097, 2048, 65536},
		{32768, 8192, 65536},
		{40000, 16384, 80000},
		{1000000, 262144, 2000000},
	}
	for _, tc := range cases {
		if h, m := Size(tc.n); h != tc.hash || m != tc.maxElems {
			t.Errorf("Size(%d) = %d, %d; want %d, %d", tc.n, h, m, tc.hash, tc.maxElems)
		}
	}
}

// Production passes the firewall Tracker itself as the desired state, and a restarted proxy
// resyncs into sets that already hold entries: the adoption path must read the Tracker
// without calling it back from inside its Range (which holds its lock). Run with a
// deadline, so that a deadlock fails the test instead of hanging the suite.
func TestResyncSetsFromTheTrackerIntoExistingSets(t *testing.T) {
	f := NewFakeKernel()
	tr := firewall.NewTracker()
	svc := model.ServiceName{Namespace: "ns", Name: "web"}
	tr.UpdateMembers(map[model.ServiceName][]firewall.Member{
		svc: members(defIPPort.Name, ipp("10.0.0.1", 80), defIPPort.Name, ipp("10.0.0.2", 80), defVIPs6.Name, ip("fd00::1"))}, false)
	checkRes(t, New(f).ResyncSets(testDefs, tr), 5) // three creates, two adds

	// The kernel now has one entry too many and one too few; a new reconciler adopts it.
	tr.UpdateMembers(map[model.ServiceName][]firewall.Member{
		svc: members(defIPPort.Name, ipp("10.0.0.1", 80), defIPPort.Name, ipp("10.0.0.3", 80), defVIPs6.Name, ip("fd00::1"))}, false)
	done := make(chan Result, 1)
	go func() { done <- New(f).ResyncSets(testDefs, tr) }()
	select {
	case res := <-done:
		checkRes(t, res, 2)
	case <-time.After(10 * time.Second):
		t.Fatal("ResyncSets from the Tracker did not return: deadlock on the Tracker's lock")
	}
	checkSet(t, f, defIPPort.Name, "10.0.0.1,tcp:80", "10.0.0.3,tcp:80")
}

// A set with marks: an entry whose mark changes is overwritten by one add (the kernel keys
// entries without their marks), never added and then deleted, which would leave no entry.
func TestApplyChangesAMarkInPlace(t *testing.T) {
	def := firewall.SetDef{Name: "KIPVS-IN-CLUSTER-LOCAL", Type: firewall.HashIPPort, Family: firewall.IPv4, SkbInfo: true}
	marked := func(m uint32) firewall.Entry { e := ipp("198.51.100.1", 80); e.Mark = m; return e }
	f := NewFakeKernel()
	r := New(f)
	checkRes(t, r.Resync([]firewall.SetDef{def}, want(def.Name, marked(0x75802001))), 2)
	checkOps(t, f, "list-headers",
		"create KIPVS-IN-CLUSTER-LOCAL hash:ip,port inet hashsize 1024 maxelem 65536 skbinfo",
		"add KIPVS-IN-CLUSTER-LOCAL 198.51.100.1,tcp:80 skbmark 0x75802001")

	c := changes(true, def.Name, marked(0x75812001))
	c[def.Name][marked(0x75802001)] = false
	checkRes(t, r.Apply(c), 1)
	checkOps(t, f, "add KIPVS-IN-CLUSTER-LOCAL 198.51.100.1,tcp:80 skbmark 0x75812001")
	checkSet(t, f, def.Name, "198.51.100.1,tcp:80 skbmark 0x75812001")
	// The cache agrees with the kernel: a Resync writes nothing.
	checkRes(t, r.Resync([]firewall.SetDef{def}, want(def.Name, marked(0x75812001))), 0)

	// An entry without a mark does not belong in it.
	if res := r.Apply(changes(true, def.Name, ipp("198.51.100.2", 80))); len(res.Errors) == 0 {
		t.Error("an entry without a mark was accepted")
	}
}

package ipvsmode

import (
	"context"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/kube-ipvs/kube-ipvs/dataplane"
	"github.com/kube-ipvs/kube-ipvs/dummyif"
	"github.com/kube-ipvs/kube-ipvs/ipvs"
	"github.com/kube-ipvs/kube-ipvs/model"
)

// fakeWatcher is a VIPWatcher the test tells what drift was heard.
type fakeWatcher struct {
	epoch uint64
	drift dummyif.Drift
}

func (w *fakeWatcher) Run(ctx context.Context, drifted func()) { <-ctx.Done() }
func (w *fakeWatcher) Epoch() uint64                           { return w.epoch }
func (w *fakeWatcher) Take() dummyif.Drift {
	d := w.drift
	w.drift = dummyif.Drift{}
	return d
}

// liveOf is the Live view of a snapshot the test keeps changing.
func liveOf(s *dataplane.Snapshot) dataplane.Live {
	return dataplane.Live{
		Services: s.Services,
		VS:       func(k model.VSKey) *model.VirtualServer { return s.VSes[k] },
		VSKeys:   maps.Keys(maps.Clone(s.VSes)), // a copy: the test changes s beside the walk
		Bound:    func(a netip.Addr) bool { return s.Binds[a] },
		Binds:    func() map[netip.Addr]bool { return s.Binds },
		NodeIPs:  s.NodeIPs, ServiceCIDRs: s.ServiceCIDRs,
	}
}

func watchedDataplane(k ipvs.Kernel, nl dummyif.Netlink, w *fakeWatcher) *Dataplane {
	dp := hookedDataplane(k, nl)
	dp.p.Watcher = w
	return dp
}

func hasOp(ops []string, prefix string) bool {
	return slices.ContainsFunc(ops, func(op string) bool { return strings.HasPrefix(op, prefix) })
}

// A change applied while a stepped repair is under way is in the kernel at once, not after
// the repair; the repair still fixes the drift it was begun for, reads kube-ipvs0's
// addresses not at all while the watcher is live, and leaves the change alone.
func TestSteppedRepairLetsChangesThroughAndKeepsThem(t *testing.T) {
	ipvsK, nl := ipvs.NewFakeKernel(), dummyif.NewFakeNetlink()
	w := &fakeWatcher{epoch: 1}
	dp := watchedDataplane(ipvsK, nl, w)
	s := snapshotOf("10.96.0.1", "10.96.0.2", "10.96.0.3", "10.96.0.4", "10.96.0.5", "10.96.0.6")
	if res := dp.repairWhole(s); res.Err != nil || res.Failed() != 0 {
		t.Fatalf("first repair: %+v", res)
	}
	lost := tcpKey("10.96.0.5", 80)
	ipvsK.Drop(lost) // drift the repair must find
	nl.TakeOps()
	ipvsK.TakeOps()

	live := liveOf(&s)
	if res := dp.BeginRepair(live); res.Err != nil {
		t.Fatalf("begin: %+v", res)
	}
	if ops := nl.TakeOps(); hasOp(ops, "addr-list") {
		t.Fatalf("the repair listed kube-ipvs0's addresses though the watcher is live: %q", ops)
	}
	res, done := dp.RepairStep(live, 2)
	if done || res.Failed() != 0 {
		t.Fatalf("first step: done %v, %+v", done, res)
	}
	if res.Listing == nil || !res.Listing.Listed {
		t.Errorf("the step that began the IPVS check says %+v, want that it lists the table (the fake lists in no time)", res.Listing)
	}

	// A change between two steps: a new Service, and one of the listed ones deleted.
	added, removed := tcpKey("10.96.0.7", 80), tcpKey("10.96.0.6", 80)
	s.VSes[added] = &model.VirtualServer{Key: added, Spec: model.VSSpec{Scheduler: "rr"}}
	s.Binds[added.Addr] = true
	delete(s.VSes, removed)
	delete(s.Binds, removed.Addr)
	ch := dataplane.Change{VSes: map[model.VSKey]*model.VirtualServer{added: s.VSes[added], removed: nil},
		Bind: []netip.Addr{added.Addr}, Unbind: []netip.Addr{removed.Addr}}
	if res := dp.Apply(ch); res.Failed() != 0 || res.Writes.IPVS != 2 {
		t.Fatalf("the change: %+v", res)
	}
	if _, err := ipvs.ReadVirtualServer(ipvsK, added); err != nil {
		t.Fatal("the change waits for the repair")
	}
	ipvsK.TakeOps()

	steps, ipvsSteps := 1, 0
	for !done {
		res, done = dp.RepairStep(live, 2)
		steps++
		if res.Failed() != 0 {
			t.Fatalf("step %d: %+v", steps, res)
		}
		if ipvsSteps == 0 && (done || dp.cycle.ipvsDone) {
			ipvsSteps = steps
		}
	}
	// The first step lists the IPVS table; then the 6 virtual servers known when it began,
	// two per step (the background checks of the sets and rules may take a step or two more).
	if ipvsSteps != 4 {
		t.Errorf("IPVS listed and checked in %d steps, want 1 + 3", ipvsSteps)
	}
	ops := ipvsK.TakeOps()
	var writes []string
	for _, op := range ops {
		if !strings.HasPrefix(op, "get") && !strings.HasPrefix(op, "list") {
			writes = append(writes, op)
		}
	}
	if len(writes) != 1 || !strings.Contains(writes[0], "10.96.0.5") {
		t.Errorf("the repair wrote %q after the change, want only the lost virtual server back", writes)
	}
	for _, k := range []model.VSKey{added, lost} {
		if _, err := ipvs.ReadVirtualServer(ipvsK, k); err != nil {
			t.Errorf("%s missing after the repair", k)
		}
	}
	if _, err := ipvs.ReadVirtualServer(ipvsK, removed); err == nil {
		t.Errorf("the repair brought back %s, deleted by a change while it ran", removed)
	}
}

// Without a live subscription the repair cannot trust its cache of kube-ipvs0: it lists the
// link, as the first repair does, and finds an address removed behind its back.
func TestSteppedRepairListsAddressesWithoutALiveWatcher(t *testing.T) {
	ipvsK, nl := ipvs.NewFakeKernel(), dummyif.NewFakeNetlink()
	w := &fakeWatcher{epoch: 1}
	dp := watchedDataplane(ipvsK, nl, w)
	s := snapshotOf("10.96.0.1")
	if res := dp.repairWhole(s); res.Err != nil {
		t.Fatal(res.Err)
	}
	w.epoch = 0 // the subscription failed
	nl.DropAddr("kube-ipvs0", netip.MustParsePrefix("10.96.0.1/32"))
	nl.TakeOps()
	if res := dp.BeginRepair(liveOf(&s)); res.Err != nil || res.Writes.Addresses != 1 {
		t.Fatalf("begin: %+v, want the address bound again", res)
	}
	if ops := nl.TakeOps(); !hasOp(ops, "addr-list") {
		t.Errorf("no listing without a live watcher: %q", ops)
	}
}

// Drift heard from the watcher: a removed address that is wanted is bound again, one that is
// not (the proxy's own unbind, heard late) is left; a lost link is made again with every
// address.
func TestRepairDriftRestoresWhatTheWatcherHeard(t *testing.T) {
	ipvsK, nl := ipvs.NewFakeKernel(), dummyif.NewFakeNetlink()
	w := &fakeWatcher{epoch: 1}
	dp := watchedDataplane(ipvsK, nl, w)
	s := snapshotOf("10.96.0.1", "10.96.0.2")
	if res := dp.repairWhole(s); res.Err != nil {
		t.Fatal(res.Err)
	}
	a, gone := netip.MustParseAddr("10.96.0.1"), netip.MustParseAddr("10.96.0.99")
	nl.DropAddr("kube-ipvs0", netip.PrefixFrom(a, 32))
	nl.TakeOps()
	w.drift = dummyif.Drift{Removed: []netip.Addr{a, gone}}
	if res := dp.RepairDrift(liveOf(&s)); res.Failed() != 0 || res.Writes.Addresses != 1 {
		t.Fatalf("drift repair: %+v, want one address written", res)
	}
	if ops := nl.TakeOps(); len(ops) != 1 || !strings.HasPrefix(ops[0], "addr-add") {
		t.Errorf("drift repair calls %q, want one addr-add and no listing", ops)
	}

	nl.DeleteLink("kube-ipvs0")
	w.drift = dummyif.Drift{Lost: true}
	if res := dp.RepairDrift(liveOf(&s)); res.Failed() != 0 {
		t.Fatalf("lost link repair: %+v", res)
	}
	if got := nl.Addrs("kube-ipvs0"); !slices.Equal(got, []string{"10.96.0.1/32", "10.96.0.2/32"}) {
		t.Errorf("after the link was lost it holds %v", got)
	}
}

// A repair asked to be whole (Live.Whole), and every repair before a whole one has
// succeeded (the kernel is not adopted yet), is one step as large as everything: asked,
// BeginRepair writes nothing to the IPVS table and the first RepairStep, whatever its
// budget, repairs everything and is done; not asked, BeginRepair does it all. After one, a
// repair not asked to be whole comes in steps.
func TestBeginRepairIsWholeWhenAskedAndAtFirst(t *testing.T) {
	ipvsK, nl := ipvs.NewFakeKernel(), dummyif.NewFakeNetlink()
	dp := watchedDataplane(ipvsK, nl, &fakeWatcher{epoch: 1})
	s := snapshotOf("10.96.0.1", "10.96.0.2")
	// inBegin: the repair was not asked to be whole, so its caller may apply changes
	// between BeginRepair and the first step: BeginRepair does it all.
	whole := func(l dataplane.Live, what string, wantIPVS int, inBegin bool) {
		t.Helper()
		begin, step := 0, wantIPVS
		if inBegin {
			begin, step = wantIPVS, 0
		}
		if res := dp.BeginRepair(l); res.Err != nil || res.Failed() != 0 || res.Writes.IPVS != begin {
			t.Fatalf("%s: begin: %+v; want %d IPVS writes", what, res, begin)
		}
		if res, done := dp.RepairStep(l, 1); !done || res.Failed() != 0 || res.Writes.IPVS != step {
			t.Fatalf("%s: first step: done %v, %+v; want done, %d IPVS writes", what, done, res, step)
		}
		for _, k := range []model.VSKey{tcpKey("10.96.0.1", 80), tcpKey("10.96.0.2", 80)} {
			if _, err := ipvs.ReadVirtualServer(ipvsK, k); err != nil {
				t.Errorf("%s: %s not in the kernel: %v", what, k, err)
			}
		}
		if got := nl.Addrs("kube-ipvs0"); !slices.Equal(got, []string{"10.96.0.1/32", "10.96.0.2/32"}) {
			t.Errorf("%s: kube-ipvs0 holds %v", what, got)
		}
	}
	whole(liveOf(&s), "first repair, not asked to be whole", 2, true)

	ipvsK.Drop(tcpKey("10.96.0.2", 80))
	l := liveOf(&s)
	l.Whole = true
	whole(l, "asked to be whole", 1, false)

	if res := dp.BeginRepair(liveOf(&s)); res.Err != nil {
		t.Fatalf("begin in steps: %+v", res)
	}
	if _, done := dp.RepairStep(liveOf(&s), 1); done {
		t.Error("after a whole repair, a repair not asked to be whole was done in one step")
	}
}

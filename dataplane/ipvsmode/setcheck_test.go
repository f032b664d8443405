package ipvsmode

import (
	"context"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"

	"github.com/kube-ipvs/kube-ipvs/controller"
	"github.com/kube-ipvs/kube-ipvs/dummyif"
	"github.com/kube-ipvs/kube-ipvs/firewall"
	"github.com/kube-ipvs/kube-ipvs/ipset"
	"github.com/kube-ipvs/kube-ipvs/iptables"
	"github.com/kube-ipvs/kube-ipvs/ipvs"
)

// The periodic repair cycles, in steps with the sets listed in the background (through a
// second handle, as production has), put back a hairpin entry deleted behind the proxy's
// back with exactly one write, and write nothing else while the kernel is intact.
func TestRepairCyclesMendASetEntryInTheBackground(t *testing.T) {
	client := fake.NewSimpleClientset()
	for i := range 20 {
		s, sl := svc(i)
		_ = client.Tracker().Add(s)
		_ = client.Tracker().Add(sl)
	}
	setsK := ipset.NewFakeKernel()
	dp := fakeDataplane(ipvs.NewFakeKernel(), dummyif.NewFakeNetlink(), setsK, iptables.NewFakeExec())
	dp.p.Sets.Lister = setsK
	cfg := controller.Config{NodeName: "node-a", DefaultScheduler: "rr", SyncPeriod: 20 * time.Millisecond, RepairStep: 3}
	host := []netip.Addr{netip.MustParseAddr("192.168.1.10")}
	ctl, err := controller.New(cfg, client, dp, func() ([]netip.Addr, error) { return host, nil }, nil, controller.Observers{}, discard)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = ctl.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	poll := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not after 10s", what)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	hairpin := func() int { es, _ := ipset.ListEntries(setsK, firewall.SetLoopBack); return len(es) }
	poll("the first sync", func() bool { return ctl.Stats().TotalSyncs >= 1 && hairpin() == 60 })
	// Let a few stepped cycles run over the intact kernel: they write nothing.
	w0 := dp.p.Sets.Writes()
	syncs := ctl.Stats().TotalSyncs
	poll("three cycles", func() bool { return ctl.Stats().TotalSyncs >= syncs+3 })
	if w := dp.p.Sets.Writes() - w0; w != 0 {
		t.Fatalf("repair cycles over intact sets wrote %d times", w)
	}

	es, _ := ipset.ListEntries(setsK, firewall.SetLoopBack)
	if err := setsK.Del(firewall.SetLoopBack, es[:1]); err != nil {
		t.Fatal(err)
	}
	poll("the entry back", func() bool { return hairpin() == 60 })
	syncs = ctl.Stats().TotalSyncs
	poll("two more cycles", func() bool { return ctl.Stats().TotalSyncs >= syncs+2 })
	if w := dp.p.Sets.Writes() - w0; w != 1 {
		t.Errorf("mending one entry took %d writes, want 1", w)
	}
}

// lateWatcher is a VIP watcher whose subscription goes live when the test says.
type lateWatcher struct{ epoch atomic.Uint64 }

func (w *lateWatcher) Run(ctx context.Context, drifted func()) { <-ctx.Done() }
func (w *lateWatcher) Epoch() uint64                           { return w.epoch.Load() }
func (w *lateWatcher) Take() dummyif.Drift                     { return dummyif.Drift{} }

// The first sync waits for the VIP notifications to be live, so that its listing of
// kube-ipvs0 is trusted and no repair cycle lists every VIP again in one step.
func TestFirstSyncWaitsForTheWatcher(t *testing.T) {
	client := fake.NewSimpleClientset()
	s, sl := svc(0)
	_ = client.Tracker().Add(s)
	_ = client.Tracker().Add(sl)
	w := &lateWatcher{}
	dp := fakeDataplane(ipvs.NewFakeKernel(), dummyif.NewFakeNetlink(), ipset.NewFakeKernel(), iptables.NewFakeExec())
	dp.p.Watcher = w
	ctl, err := controller.New(controller.Config{NodeName: "node-a", DefaultScheduler: "rr", SyncPeriod: time.Hour}, client, dp,
		func() ([]netip.Addr, error) { return nil, nil }, nil, controller.Observers{}, discard)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = ctl.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	time.Sleep(300 * time.Millisecond)
	if n := ctl.Stats().TotalSyncs; n != 0 {
		t.Fatalf("%d syncs before the watcher was live", n)
	}
	w.epoch.Store(1)
	deadline := time.Now().Add(5 * time.Second)
	for ctl.Stats().TotalSyncs == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no first sync after the watcher went live")
		}
		time.Sleep(2 * time.Millisecond)
	}
	if !dp.addrListingTrusted() {
		t.Error("the first sync's listing is not trusted though the watcher was live")
	}
}

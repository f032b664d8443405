package controller

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"

	"github.com/kube-ipvs/kube-ipvs/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/foreground"
	"github.com/kube-ipvs/kube-ipvs/model"
)

// steppedDP is fakeDP with a repair in steps that each wait for the test (gate), so that
// the test decides when a change arrives relative to the steps. Its events say, in order,
// what the loop did: "step" for a repair step, the keys of an Apply that changed a virtual
// server.
type steppedDP struct {
	*fakeDP
	gate   chan struct{}
	events chan string
	keys   []model.VSKey
	wrote  map[model.VSKey]int // the repair's writes per key
	// waits is how many RepairSteps of the first cycle only find it Waiting (waited: when
	// each came); yielded records, per real step, whether live said a change waits.
	waits   int
	waited  []time.Time
	yielded []bool
	// gateUp records, per Apply that wrote and per real step, whether the foreground gate
	// was up (the background's listings parked).
	gateUp []string
	// fg is the foreground gate the controller under test raises (startStepped makes it).
	fg *foreground.Gate
	// entered, when not nil, hears of each real step as it begins, before it waits for
	// gate: the test knows the loop is inside the step.
	entered chan struct{}
}

var _ dataplane.Dataplane = (*steppedDP)(nil)

func (s *steppedDP) Apply(ch dataplane.Change) dataplane.Result {
	res := s.fakeDP.Apply(ch)
	if res.Writes.IPVS > 0 {
		s.gateUp = append(s.gateUp, fmt.Sprint("apply:", s.fg.Up()))
		var ks []string
		for k := range ch.VSes {
			ks = append(ks, k.String())
		}
		sort.Strings(ks)
		s.events <- fmt.Sprint("apply ", ks)
	}
	return res
}

func (s *steppedDP) BeginRepair(l dataplane.Live) dataplane.Result {
	if l.Whole {
		return s.fakeDP.BeginRepair(l)
	}
	s.keys = nil
	for k := range l.VSKeys {
		s.keys = append(s.keys, k)
	}
	sort.Slice(s.keys, func(i, j int) bool { return model.VSKeyLess(s.keys[i], s.keys[j]) })
	s.events <- "begin"
	return dataplane.Result{}
}

// RepairStep compares budget virtual servers with the desired state as it is now and writes
// what differs.
func (s *steppedDP) RepairStep(l dataplane.Live, budget int) (dataplane.Result, bool) {
	if l.Whole {
		return s.fakeDP.RepairStep(l, budget)
	}
	if s.waits > 0 {
		s.waits--
		s.waited = append(s.waited, time.Now())
		return dataplane.Result{Waiting: true}, false
	}
	select {
	case s.entered <- struct{}{}: // (nil: never)
	default: // nobody waits any more: the test is past its steps
	}
	<-s.gate
	s.yielded = append(s.yielded, l.Yielding())
	s.gateUp = append(s.gateUp, fmt.Sprint("step:", s.fg.Up()))
	var res dataplane.Result
	n := min(budget, len(s.keys))
	for _, k := range s.keys[:n] {
		if want := l.VS(k); want != nil && (s.vs[k] == nil || !s.vs[k].Equal(want)) {
			s.vs[k] = want
			s.wrote[k]++
			res.Writes.IPVS++
		}
	}
	s.keys = s.keys[n:]
	s.events <- "step"
	return res, len(s.keys) == 0
}

// startStepped adds services Services (s0, s1, ...: one endpoint each) to a fake clientset
// and runs a controller over dp (a repair step a virtual server) until stop; hostAddrs nil
// lists one fixed node address.
func startStepped(t *testing.T, services int, dp *steppedDP, period time.Duration, hostAddrs func() ([]netip.Addr, error), log io.Writer) (h *harness, ctx context.Context, stop func()) {
	t.Helper()
	client := fake.NewClientset()
	for i := range services {
		name := fmt.Sprintf("s%d", i)
		_ = client.Tracker().Add(service(name, fmt.Sprintf("10.96.1.%d", i+1), nil))
		_ = client.Tracker().Add(slice(name, name+"-1", fmt.Sprintf("10.244.1.%d", i+1)))
	}
	if hostAddrs == nil {
		hostAddrs = func() ([]netip.Addr, error) { return []netip.Addr{netip.MustParseAddr("203.0.113.10")}, nil }
	}
	dp.fg = foreground.NewGate()
	cfg := Config{NodeName: "node-a", DefaultScheduler: "rr", SyncPeriod: period, RepairStep: 1, Gate: dp.fg}
	c, err := New(cfg, client, dp, hostAddrs, record.NewFakeRecorder(100), Observers{}, slog.New(slog.NewTextHandler(log, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = c.Run(ctx); close(done) }()
	return &harness{t: t, client: client, c: c}, ctx, func() { cancel(); <-done }
}

// openGate is a steppedDP gate that never holds a step.
func openGate() chan struct{} {
	g := make(chan struct{})
	close(g)
	return g
}

func next(t *testing.T, events <-chan string) string {
	t.Helper()
	select {
	case e := <-events:
		return e
	case <-time.After(10 * time.Second):
		t.Fatal("the loop did nothing for 10 s")
		return ""
	}
}

// A change that arrives while a repair cycle is under way is applied after the step in
// progress, before the next one: it waits for one step, not for the repair (the loop's
// order is asserted, not its timing). The repair's later steps find it right and write
// nothing for it.
func TestChangeIsAppliedBetweenRepairSteps(t *testing.T) {
	dp := &steppedDP{fakeDP: newFakeDP(), gate: make(chan struct{}), events: make(chan string, 100), wrote: map[model.VSKey]int{},
		entered: make(chan struct{}, 10)}
	h, ctx, stopLoop := startStepped(t, 6, dp, 20*time.Millisecond, nil, io.Discard)
	client := h.client
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			close(dp.gate) // let the steps of a cycle that began meanwhile run out
			stopLoop()
		}
	}
	defer stop()

	// The first repair is whole (no events); the period's next one runs in steps.
	for e := next(t, dp.events); e != "begin"; e = next(t, dp.events) {
		t.Logf("before the cycle: %s", e)
	}
	waitEntered(t, dp)
	dp.gate <- struct{}{}
	if e := next(t, dp.events); e != "step" {
		t.Fatalf("event %q, want the first step", e)
	}
	waitEntered(t, dp)
	// The loop is now in the second step, waiting for the gate. A change arrives.
	changed := vsKey("10.96.1.4", 80)
	sl := slice("s3", "s3-1", "10.244.1.4", "10.244.9.9")
	if _, err := client.DiscoveryV1().EndpointSlices("ns").Update(ctx, sl, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.waitDirty("s3")
	if !dp.fg.Up() {
		t.Errorf("a change waits for the step in progress, and the background's listings do not give way to it (the foreground gate is down)")
	}
	dp.gate <- struct{}{} // the second step ends
	if e := next(t, dp.events); e != "step" {
		t.Fatalf("event %q, want the second step", e)
	}
	if e, want := next(t, dp.events), fmt.Sprint("apply ", []string{changed.String()}); e != want {
		t.Fatalf("after the step in progress the loop did %q; want the change applied: %q", e, want)
	}
	for steps := 3; steps <= 6; steps++ { // one virtual server a step
		dp.gate <- struct{}{}
		if e := next(t, dp.events); e != "step" {
			t.Fatalf("event %q, want step %d", e, steps)
		}
	}
	h.waitStats(func(s Stats) bool { return s.Full && s.TotalSyncs >= 2 }) // the cycle ended
	stop()
	if dp.wrote[changed] != 0 {
		t.Errorf("the repair wrote %s %d times after the change", changed, dp.wrote[changed])
	}
	if got := dp.vs[changed]; got == nil || len(got.Reals) != 2 {
		t.Errorf("after the cycle %s is %v; the change (2 real servers) must stay", changed, got)
	}
	// The step under way when the change came was told so (and could end early); the first
	// was not.
	if len(dp.yielded) < 2 || dp.yielded[0] || !dp.yielded[1] {
		t.Errorf("steps told a change waits: %v; want [false true ...]", dp.yielded)
	}
	// The gate is up from the change's arrival to its Apply, and down for the steps after:
	// the background gives way to the change, not to the repair.
	if got, want := strings.Join(dp.gateUp, " "), "step:false step:true apply:true step:false step:false step:false step:false"; got != want {
		t.Errorf("foreground gate per step and Apply: %s; want %s", got, want)
	}
	if dp.fg.Up() {
		t.Errorf("the gate is up after the loop stopped")
	}
}

// waitEntered waits until the loop is inside a step of dp.
func waitEntered(t *testing.T, dp *steppedDP) {
	t.Helper()
	select {
	case <-dp.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the loop began no step for 10 s")
	}
}

// runOneCycle starts a controller on services Services (s0, s1, ...: one endpoint each) over
// a steppedDP whose steps never block and whose first waits RepairSteps find the background
// work not in yet, lets its first (whole) repair run, calls before, asks for a repair cycle,
// and returns once that ended and the controller stopped.
func runOneCycle(t *testing.T, services, waits int, log io.Writer, before func(c *Controller)) *steppedDP {
	t.Helper()
	dp := &steppedDP{fakeDP: newFakeDP(), gate: openGate(), events: make(chan string, 1000), wrote: map[model.VSKey]int{}, waits: waits}
	h, _, stop := startStepped(t, services, dp, time.Hour, nil, log)
	defer stop()
	c := h.c
	h.waitStats(func(s Stats) bool { return s.Full }) // the first repair, whole
	before(c)
	c.mu.Lock()
	c.nodeChanged = true // asks for a repair now: a cycle, since one whole repair ran
	c.mu.Unlock()
	c.poke()
	h.waitStats(func(s Stats) bool { return s.Full && s.TotalSyncs >= 2 })
	return dp
}

// A RepairStep that only finds the dataplane waiting for its background work is a pause:
// the loop polls it StepPause apart (it does not spin), and it is neither a step nor busy
// time in the cycle's account.
func TestWaitingRepairStepsArePausesNotSteps(t *testing.T) {
	const waits = 4
	var logs syncBuffer
	dp := runOneCycle(t, 3, waits, &logs, func(*Controller) {})
	if len(dp.waited) != waits {
		t.Fatalf("%d waiting steps, want %d", len(dp.waited), waits)
	}
	if spent, least := dp.waited[waits-1].Sub(dp.waited[0]), (waits-1)*dataplane.StepPause; spent < least {
		t.Errorf("%d waiting steps within %v: the loop spun (want them at least %v apart)", waits, spent, dataplane.StepPause)
	}
	// 3 unchanged Services passed over in one step, the dataplane's begin, 3 virtual
	// servers checked.
	line := logs.line("repair cycle done")
	if !strings.Contains(line, " steps=5 ") || !strings.Contains(line, " unchanged_services=3 ") {
		t.Errorf("cycle log %q; want steps=5 (the waiting ones are not steps), unchanged_services=3", line)
	}
}

// syncBuffer is a log sink the loop writes while the test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// line returns the first logged line holding msg ("" if none).
func (s *syncBuffer) line(msg string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range strings.Split(s.b.String(), "\n") {
		if strings.Contains(l, msg) {
			return l
		}
	}
	return ""
}

// A Service whose deletion the informers never told of (gone from their cache, no event) is
// removed by the next repair cycle: the cycle recomputes every Service the proxy holds,
// not only those the informers list.
func TestRepairCycleRemovesAServiceTheInformersLost(t *testing.T) {
	lost := vsKey("10.96.1.2", 80)
	dp := runOneCycle(t, 2, 0, io.Discard, func(c *Controller) {
		store := c.src.svcInf.GetStore()
		obj, ok, err := store.GetByKey("ns/s1")
		if err != nil || !ok {
			t.Fatalf("the informer's s1: %v %v", ok, err)
		}
		if err := store.Delete(obj); err != nil { // no event: as if the watch had missed it
			t.Fatal(err)
		}
	})
	if dp.vs[lost] != nil {
		t.Errorf("after the cycle the lost Service's virtual server %s is still there", lost)
	}
	if dp.vs[vsKey("10.96.1.1", 80)] == nil {
		t.Error("the other Service's virtual server is gone")
	}
}

// A repair cycle lists the node's addresses off the sync loop (in the address binding the
// listing holds every VIP): a change that arrives while the listing is slow is applied
// before it ends, and the cycle goes on once it is in.
func TestChangeIsAppliedWhileTheCycleListsTheNodesAddresses(t *testing.T) {
	dp := &steppedDP{fakeDP: newFakeDP(), gate: openGate(), events: make(chan string, 1000), wrote: map[model.VSKey]int{}}
	var calls atomic.Int32
	listing, release := make(chan struct{}, 1), make(chan struct{})
	hostAddrs := func() ([]netip.Addr, error) {
		if calls.Add(1) > 1 { // the first full sync's listing is quick, the cycle's is slow
			listing <- struct{}{}
			<-release
		}
		return []netip.Addr{netip.MustParseAddr("203.0.113.10")}, nil
	}
	h, ctx, stop := startStepped(t, 3, dp, time.Hour, hostAddrs, io.Discard)
	c, client := h.c, h.client
	released := false
	defer func() {
		if !released {
			close(release)
		}
		stop()
	}()
	h.waitStats(func(s Stats) bool { return s.Full }) // the first repair, whole
	for len(dp.events) > 0 {
		<-dp.events
	}
	c.mu.Lock()
	c.nodeChanged = true // asks for a repair now: a cycle, since one whole repair ran
	c.mu.Unlock()
	c.poke()
	select {
	case <-listing:
	case <-time.After(10 * time.Second):
		t.Fatal("the repair cycle never listed the node's addresses")
	}
	changed := vsKey("10.96.1.2", 80)
	if _, err := client.DiscoveryV1().EndpointSlices("ns").Update(ctx, slice("s1", "s1-1", "10.244.1.2", "10.244.9.9"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if e, want := next(t, dp.events), fmt.Sprint("apply ", []string{changed.String()}); e != want {
		t.Fatalf("while the cycle listed the node's addresses the loop did %q; want the change applied: %q", e, want)
	}
	close(release)
	released = true
	h.waitStats(func(s Stats) bool { return s.Full && s.TotalSyncs >= 2 }) // the cycle ended
	began := false
	for len(dp.events) > 0 {
		e := <-dp.events
		began = began || e == "begin"
	}
	if !began {
		t.Fatalf("the cycle ended without the dataplane's repair")
	}
}

package controller

import (
	"context"
	"io"
	"log/slog"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"

	"github.com/kube-ipvs/kube-ipvs/model"
)

type schedUnavailable struct{ s string }

func (e schedUnavailable) Error() string                { return "no scheduler " + e.s }
func (e schedUnavailable) UnavailableScheduler() string { return e.s }

func service(name, ip string, annotations map[string]string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Annotations: annotations},
		Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeClusterIP, ClusterIP: ip, ClusterIPs: []string{ip},
			Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}},
		},
	}
}

func slice(svc, name string, ips ...string) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "ns", Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To[int32](8080)}},
	}
	for _, ip := range ips {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
	}
	return s
}

type harness struct {
	t        *testing.T
	client   *fake.Clientset
	dp       *fakeDP
	recorder *record.FakeRecorder
	c        *Controller
}

func newHarness(t *testing.T) *harness {
	return startHarness(t, fake.NewClientset(), Observers{})
}

// startHarness builds the controller over client with fake kernel reconcilers and the given
// observers (a FakeRecorder for Events), and starts its informers: when it returns, every
// object client held is marked changed, and nothing is synced yet.
func startHarness(t *testing.T, client *fake.Clientset, obs Observers) *harness {
	t.Helper()
	return startHarnessWith(t, client, obs, Config{NodeName: "node-a", DefaultScheduler: "rr", SyncPeriod: time.Hour})
}

// startHarnessWith is startHarness with the controller's Config given.
func startHarnessWith(t *testing.T, client *fake.Clientset, obs Observers, cfg Config) *harness {
	t.Helper()
	h := &harness{t: t, client: client,
		dp:       newFakeDP(),
		recorder: record.NewFakeRecorder(100)}
	hostAddrs := func() ([]netip.Addr, error) { return []netip.Addr{netip.MustParseAddr("203.0.113.10")}, nil }
	c, err := New(cfg, h.client, h.dp, hostAddrs, h.recorder, obs, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	h.c = c
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := c.src.start(ctx); err != nil {
		t.Fatal(err)
	}
	c.waitServiceCIDRs(ctx)
	return h
}

// settle waits until the informers delivered n more changes, then syncs the dirty Services.
func (h *harness) syncChanged() Stats {
	h.t.Helper()
	if err := h.c.sync(false); err != nil {
		h.t.Logf("sync: %v", err)
	}
	return h.c.Stats()
}

func (h *harness) waitDirty(name string) {
	h.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		h.c.mu.Lock()
		d := h.c.dirty[model.ServiceName{Namespace: "ns", Name: name}]
		h.c.mu.Unlock()
		if d {
			return
		}
		time.Sleep(time.Millisecond)
	}
	h.t.Fatalf("Service ns/%s was never marked changed", name)
}

// waitSlice waits until the informer cache holds the EndpointSlice ns/name, and returns it.
func (h *harness) waitSlice(name string) *discoveryv1.EndpointSlice {
	h.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if o, ok, _ := h.c.src.slices.GetByKey("ns/" + name); ok {
			return o.(*discoveryv1.EndpointSlice)
		}
		time.Sleep(time.Millisecond)
	}
	h.t.Fatalf("EndpointSlice ns/%s never reached the informer cache", name)
	return nil
}

func vsKey(ip string, port uint16) model.VSKey {
	return model.VSKey{Addr: netip.MustParseAddr(ip), Proto: model.TCP, Port: port}
}

func TestFullSyncThenNoOpAndIncrementalChanges(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	h.client.CoreV1().Services("ns").Create(ctx, service("a", "10.96.0.1", nil), metav1.CreateOptions{})
	h.client.DiscoveryV1().EndpointSlices("ns").Create(ctx, slice("a", "a-1", "10.244.0.1", "10.244.0.2"), metav1.CreateOptions{})
	h.client.CoreV1().Services("ns").Create(ctx, service("b", "10.96.0.2", nil), metav1.CreateOptions{})
	h.waitDirty("a")
	h.waitDirty("b")
	h.waitSlice("a-1") // a's mark may come from its Service alone

	if err := h.c.sync(true); err != nil {
		t.Fatal(err)
	}
	if got := h.dp.vs[vsKey("10.96.0.1", 80)]; got == nil || len(got.Reals) != 2 {
		t.Fatalf("service a's virtual server: %v", got)
	}
	if !h.dp.bound[netip.MustParseAddr("10.96.0.1")] || !h.dp.bound[netip.MustParseAddr("10.96.0.2")] {
		t.Fatalf("bound addresses: %v", h.dp.bound)
	}

	// Nothing changed: nothing is written.
	if st := h.syncChanged(); st.IPVSWrites != 0 || st.AddrWrites != 0 {
		t.Fatalf("no-op sync wrote: %+v", st)
	}
	if err := h.c.sync(true); err != nil || h.c.Stats().IPVSWrites != 0 || h.c.Stats().AddrWrites != 0 {
		t.Fatalf("no-op full sync: err %v, stats %+v", err, h.c.Stats())
	}

	// One endpoint added to a: exactly a's virtual server changes, b is not recomputed.
	h.client.DiscoveryV1().EndpointSlices("ns").Update(ctx, slice("a", "a-1", "10.244.0.1", "10.244.0.2", "10.244.0.3"), metav1.UpdateOptions{})
	h.waitDirty("a")
	st := h.syncChanged()
	if st.Services != 1 || st.IPVSWrites != 1 || st.AddrWrites != 0 {
		t.Fatalf("endpoint change: %+v", st)
	}
	if n := len(h.dp.vs[vsKey("10.96.0.1", 80)].Reals); n != 3 {
		t.Fatalf("a has %d real servers, want 3", n)
	}

	// Service b deleted: its virtual server and address go.
	h.client.CoreV1().Services("ns").Delete(ctx, "b", metav1.DeleteOptions{})
	h.waitDirty("b")
	h.syncChanged()
	if h.dp.vs[vsKey("10.96.0.2", 80)] != nil || h.dp.bound[netip.MustParseAddr("10.96.0.2")] {
		t.Fatalf("deleted service b left %v / %v", h.dp.vs, h.dp.bound)
	}
}

func TestInvalidSchedulerRaisesOneEventAndUsesDefault(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	h.client.CoreV1().Services("ns").Create(ctx, service("bad", "10.96.0.5", map[string]string{"kube-ipvs.io/scheduler": "fastest"}), metav1.CreateOptions{})
	h.waitDirty("bad")
	h.syncChanged()
	if got := h.dp.vs[vsKey("10.96.0.5", 80)]; got == nil || got.Spec.Scheduler != "rr" {
		t.Fatalf("virtual server %v, want scheduler rr", got)
	}
	select {
	case e := <-h.recorder.Events:
		if !strings.Contains(e, "Warning InvalidScheduler") || !strings.Contains(e, "fastest") {
			t.Fatalf("event %q", e)
		}
	default:
		t.Fatal("no event recorded")
	}
	// The same problem again raises no second event.
	h.c.sync(true)
	select {
	case e := <-h.recorder.Events:
		t.Fatalf("second event for a standing problem: %q", e)
	default:
	}
}

func TestSchedulerTheKernelLacksFallsBackToDefault(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	h.client.CoreV1().Services("ns").Create(ctx, service("t", "10.96.0.6", map[string]string{"kube-ipvs.io/scheduler": "twos"}), metav1.CreateOptions{})
	h.waitDirty("t")
	h.dp.failNext[vsKey("10.96.0.6", 80)] = schedUnavailable{"twos"}
	h.syncChanged()
	h.syncChanged() // the Service was queued again with the scheduler marked unavailable
	if got := h.dp.vs[vsKey("10.96.0.6", 80)]; got == nil || got.Spec.Scheduler != "rr" {
		t.Fatalf("virtual server %v, want the default rr", got)
	}
	found := false
	for len(h.recorder.Events) > 0 {
		if e := <-h.recorder.Events; strings.Contains(e, "SchedulerUnavailable") {
			found = true
		}
	}
	if !found {
		t.Fatal("no SchedulerUnavailable event")
	}
}

func TestFailedWriteIsRetried(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	h.client.CoreV1().Services("ns").Create(ctx, service("r", "10.96.0.7", nil), metav1.CreateOptions{})
	h.waitDirty("r")
	h.dp.failNext[vsKey("10.96.0.7", 80)] = io.ErrUnexpectedEOF
	if err := h.c.sync(false); err == nil {
		t.Fatal("a failed kernel call must fail the sync")
	}
	if h.dp.vs[vsKey("10.96.0.7", 80)] != nil {
		t.Fatal("fake applied a failing write")
	}
	// No new event: the retry alone brings it in.
	if err := h.c.sync(false); err != nil {
		t.Fatal(err)
	}
	if h.dp.vs[vsKey("10.96.0.7", 80)] == nil {
		t.Fatal("the failed virtual server was not retried")
	}
}

func TestConflictingVirtualServerGoesToFirstOwnerThenMoves(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	for _, n := range []string{"one", "two"} {
		s := service(n, "10.96.1.1", nil)
		s.Spec.ClusterIPs = []string{map[string]string{"one": "10.96.1.1", "two": "10.96.1.2"}[n]}
		s.Spec.ClusterIP = s.Spec.ClusterIPs[0]
		s.Spec.ExternalIPs = []string{"198.51.100.7"}
		h.client.CoreV1().Services("ns").Create(ctx, s, metav1.CreateOptions{})
		h.waitDirty(n)
	}
	h.syncChanged()
	d := h.c.state
	if o, _ := d.ownerOf(vsKey("198.51.100.7", 80)); o.Name != "one" {
		t.Fatalf("shared external IP owned by %v, want ns/one", o)
	}
	h.client.CoreV1().Services("ns").Delete(ctx, "one", metav1.DeleteOptions{})
	h.waitDirty("one")
	h.syncChanged() // one released it: two is queued again
	h.syncChanged()
	if o, _ := d.ownerOf(vsKey("198.51.100.7", 80)); o.Name != "two" {
		t.Fatalf("after ns/one left, external IP owned by %v, want ns/two", o)
	}
	if h.dp.vs[vsKey("198.51.100.7", 80)] == nil || !h.dp.bound[netip.MustParseAddr("198.51.100.7")] {
		t.Fatal("ns/two's external IP is not programmed")
	}
}

// Changes arriving faster than MinSyncPeriod are applied together, not one sync each.
func TestBurstOfChangesIsCoalesced(t *testing.T) {
	h := newHarness(t)
	h.c.sched.minInterval = 500 * time.Millisecond // changes arriving within it coalesce
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = h.c.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	h.waitStats(func(s Stats) bool { return s.TotalSyncs >= 1 }) // the initial full sync
	start := time.Now()
	for i := 0; i < 20; i++ {
		s := service("burst"+string(rune('a'+i)), "10.96.9."+strconv.Itoa(i+1), nil)
		if _, err := h.client.CoreV1().Services("ns").Create(context.Background(), s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	burst := time.Since(start)
	st := h.waitStats(func(s Stats) bool { return s.VirtualSrvrs == 20 })
	// One full sync, then at most one sync per MinSyncPeriod the burst lasted, one as it
	// began and one for its tail. On an idle machine the 20 creates take milliseconds and that
	// is 4; on a starved one they take longer and the bound follows, without reaching the 21
	// syncs of one per change unless the burst outlasted 17 periods.
	allowed := 3 + int(burst/h.c.sched.minInterval)
	if allowed >= 21 {
		t.Fatalf("the 20 creates took %v, %d sync periods: too slow to tell coalescing from none", burst, allowed-3)
	}
	if st.TotalSyncs > allowed {
		t.Errorf("20 changes in %v took %d syncs, more than %d; they must be coalesced", burst, st.TotalSyncs, allowed)
	}
}

func (h *harness) waitStats(cond func(Stats) bool) Stats {
	h.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if s := h.c.Stats(); cond(s) {
			return s
		}
		time.Sleep(5 * time.Millisecond)
	}
	h.t.Fatalf("timed out; last stats %+v", h.c.Stats())
	return Stats{}
}

// A step that fails as a whole (a restore, a listing) asks for a full repair from the
// desired state as soon as the backoff allows, rather than retrying keys.
func TestWholeStepFailureAsksForARepair(t *testing.T) {
	h := newHarness(t)
	if err := h.c.sync(true); err != nil {
		t.Fatal(err)
	}
	h.client.CoreV1().Services("ns").Create(context.Background(), service("a", "10.96.0.1", nil), metav1.CreateOptions{})
	h.waitDirty("a")
	h.dp.applyErr = io.ErrUnexpectedEOF
	if err := h.c.sync(false); err == nil {
		t.Fatal("a failed step must fail the sync")
	}
	if !h.c.sched.fullDue {
		t.Fatal("no repair was asked for after a whole-step failure")
	}
	repairs := h.dp.repairs
	h.c.sched.ticked(time.Now(), 0) // the fake has no periodic work
	if w, _ := h.c.sched.decide(time.Now().Add(2*time.Second), false, false); w != full {
		t.Fatalf("after the backoff the schedule says %v, want a full repair", w)
	}
	if err := h.c.sync(true); err != nil || h.dp.repairs != repairs+1 {
		t.Fatalf("repair: %v, %d repairs", err, h.dp.repairs-repairs)
	}
}

// A Service that loses a virtual server to another is handed to the dataplane without it,
// so that no part of a mode (set entries, rules) writes anything for what it lost.
func TestConflictLoserIsStagedWithoutTheLostVirtualServer(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	for _, n := range []string{"one", "two"} {
		s := service(n, map[string]string{"one": "10.96.1.1", "two": "10.96.1.2"}[n], nil)
		s.Spec.ExternalIPs = []string{"198.51.100.7"}
		h.client.CoreV1().Services("ns").Create(ctx, s, metav1.CreateOptions{})
		h.waitDirty(n)
	}
	h.syncChanged()
	lost := vsKey("198.51.100.7", 80)
	two := h.dp.services[model.ServiceName{Namespace: "ns", Name: "two"}]
	if two == nil || two.VSes[lost] != nil || two.VSes[vsKey("10.96.1.2", 80)] == nil {
		t.Fatalf("ns/two staged as %+v: want its ClusterIP without the external IP it lost", two)
	}
	if one := h.dp.services[model.ServiceName{Namespace: "ns", Name: "one"}]; one == nil || one.VSes[lost] == nil {
		t.Fatalf("ns/one staged without the external IP it won: %+v", one)
	}
	found := false
	for len(h.recorder.Events) > 0 {
		if e := <-h.recorder.Events; strings.Contains(e, "VirtualServerConflict") && strings.Contains(e, "ns/one") {
			found = true
		}
	}
	if !found {
		t.Fatal("no Warning Event naming the winner")
	}
}

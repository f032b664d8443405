package controller

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/kube-ipvs/kube-ipvs/healthcheck"
	"github.com/kube-ipvs/kube-ipvs/metrics"
	"github.com/kube-ipvs/kube-ipvs/model"
)

// scaleService is Service i of a synthetic cluster: ClusterIP 10.96.x.y, two endpoints.
func scaleService(i int) (*corev1.Service, *discoveryv1.EndpointSlice) {
	name := fmt.Sprintf("s%05d", i)
	ip := fmt.Sprintf("10.96.%d.%d", i/250, i%250+1)
	return service(name, ip, nil), slice(name, name+"-1", fmt.Sprintf("10.244.%d.%d", i/250, i%250+1), fmt.Sprintf("10.245.%d.%d", i/250, i%250+1))
}

// scaleHarness is a controller with every observer production has, on a fake clientset
// that already holds n Services when the informers start, after its first full sync.
func scaleHarness(t *testing.T, n int) *harness {
	t.Helper()
	client := fake.NewClientset()
	for i := range n {
		svc, sl := scaleService(i)
		if err := client.Tracker().Add(svc); err != nil {
			t.Fatal(err)
		}
		if err := client.Tracker().Add(sl); err != nil {
			t.Fatal(err)
		}
	}
	ph := healthcheck.NewProxyHealth(time.Hour)
	sh := healthcheck.NewServiceHealth(ph.Live)
	t.Cleanup(sh.Close)
	h := startHarness(t, client, Observers{Metrics: metrics.New(metrics.WithoutRuntimeMetrics()), ProxyHealth: ph, ServiceHealth: sh})
	c := h.c
	if err := c.sync(true); err != nil {
		t.Fatal(err)
	}
	if got := len(h.dp.vs); got != n {
		t.Fatalf("%d virtual servers after the full sync, want %d", got, n)
	}
	return h
}

// bytesPerEndpointChange is the memory one incremental sync of one endpoint change
// allocates, averaged over several changes.
func bytesPerEndpointChange(t *testing.T, h *harness, n int) uint64 {
	t.Helper()
	const changes = 20
	var total uint64
	for k := range changes {
		i := (k * 7919) % n
		svc, _ := scaleService(i)
		sl := slice(svc.Name, svc.Name+"-1", fmt.Sprintf("10.246.%d.%d", k/250, k%250+1))
		if err := h.client.Tracker().Update(discoveryv1.SchemeGroupVersion.WithResource("endpointslices"), sl, "ns"); err != nil {
			t.Fatal(err)
		}
		h.waitDirty(svc.Name)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		if err := h.c.sync(false); err != nil {
			t.Fatal(err)
		}
		runtime.ReadMemStats(&after)
		if st := h.c.Stats(); st.Services != 1 || st.IPVSWrites != 1 {
			t.Fatalf("endpoint change: %+v, want 1 Service and 1 write", st)
		}
		total += after.TotalAlloc - before.TotalAlloc
	}
	return total / changes
}

// An incremental sync must cost the same in a large cluster as in a small one: nothing on
// its path may copy or walk every virtual server (allVSes, allBinds) or every Service. The
// memory it allocates is a deterministic witness of such copies.
func TestIncrementalSyncCostDoesNotGrowWithServices(t *testing.T) {
	small := bytesPerEndpointChange(t, scaleHarness(t, 100), 100)
	large := bytesPerEndpointChange(t, scaleHarness(t, 5000), 5000)
	t.Logf("bytes allocated per endpoint change: %d with 100 Services, %d with 5,000", small, large)
	if large > 2*small {
		t.Errorf("an endpoint change allocates %d bytes with 5,000 Services and %d with 100: something in the sync is O(Services)", large, small)
	}
}

// The handlers' own HasSynced is awaited: when start returns, every initial Service has
// been marked, so the first full sync covers them all and no second sync recomputes them.
func TestInitialEventsAreDeliveredBeforeTheFirstSync(t *testing.T) {
	const n = 3000
	client := fake.NewClientset()
	for i := range n {
		svc, sl := scaleService(i)
		_ = client.Tracker().Add(svc)
		_ = client.Tracker().Add(sl)
	}
	c := startHarness(t, client, Observers{}).c
	c.mu.Lock()
	got := len(c.dirty)
	c.mu.Unlock()
	if got != n {
		t.Fatalf("%d Services marked when the caches reported synced, want all %d", got, n)
	}
	if err := c.sync(true); err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	got = len(c.dirty)
	c.mu.Unlock()
	if got != 0 {
		t.Fatalf("%d Services still marked after the first full sync: a second sync would recompute them", got)
	}
}

// The informers keep no managedFields, last-applied-configuration annotations, slice owner
// references or endpoint targetRefs: on a real API server they are a large part of each of
// tens of thousands of cached objects, and the proxy never reads them. What it reads stays.
func TestInformerCacheDropsWhatTheProxyNeverReads(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	svc := service("m", "10.96.0.9", map[string]string{lastApplied: `{"kind":"Service"}`, "kube-ipvs.io/scheduler": "wrr"})
	svc.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationUpdate}}
	if _, err := h.client.CoreV1().Services("ns").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sl := slice("m", "m-1", "10.244.0.1")
	sl.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Service", Name: "m", UID: "u"}}
	sl.Endpoints[0].TargetRef = &corev1.ObjectReference{Kind: "Pod", Namespace: "ns", Name: "m-abc"}
	sl.Endpoints[0].NodeName = ptr.To("node-a")
	if _, err := h.client.DiscoveryV1().EndpointSlices("ns").Create(ctx, sl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.waitDirty("m")
	// The slice's event may mark m dirty before the Service's own event reached the cache.
	got, err := h.c.src.services.Services("ns").Get("m")
	for deadline := time.Now().Add(5 * time.Second); err != nil && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
		got, err = h.c.src.services.Services("ns").Get("m")
	}
	if err != nil {
		t.Fatal(err)
	}
	if len(got.ManagedFields) != 0 || got.Annotations[lastApplied] != "" {
		t.Fatalf("cached Service keeps %d managedFields entries, last-applied %q", len(got.ManagedFields), got.Annotations[lastApplied])
	}
	if got.Spec.ClusterIP != "10.96.0.9" || got.Annotations["kube-ipvs.io/scheduler"] != "wrr" {
		t.Fatalf("cached Service lost what the proxy reads: %+v %v", got.Spec, got.Annotations)
	}
	cached := h.waitSlice("m-1")
	if want := (corev1.ObjectReference{Kind: "Pod", Name: "m-abc"}); len(cached.OwnerReferences) != 0 || cached.Endpoints[0].TargetRef == nil || *cached.Endpoints[0].TargetRef != want {
		t.Fatalf("cached EndpointSlice keeps owner references %v, or a targetRef %v other than the Pod's name", cached.OwnerReferences, cached.Endpoints[0].TargetRef)
	}
	if cached.Endpoints[0].Addresses[0] != "10.244.0.1" || cached.Endpoints[0].NodeName == nil || *cached.Endpoints[0].NodeName != "node-a" {
		t.Fatalf("cached EndpointSlice lost what the proxy reads: %+v", cached.Endpoints[0])
	}
}

// The counters the sync keeps instead of walking the state (real servers, Services with a
// health-check node port) always equal a full recount.
func TestDesiredStateCountersMatchARecount(t *testing.T) {
	d := newDesiredState()
	rng := rand.New(rand.NewPCG(1, 2))
	names := make([]model.ServiceName, 40)
	for i := range names {
		names[i] = model.ServiceName{Namespace: "ns", Name: fmt.Sprintf("s%d", i)}
	}
	for step := range 2000 {
		name := names[rng.IntN(len(names))]
		if rng.IntN(4) == 0 {
			d.update(name, nil)
		} else {
			st := &model.ServiceState{Name: name, VSes: map[model.VSKey]*model.VirtualServer{}}
			// Keys overlap between Services, so some are contended.
			for v := range 1 + rng.IntN(3) {
				key := model.VSKey{Addr: netip.AddrFrom4([4]byte{10, 96, 0, byte(rng.IntN(30))}), Proto: model.TCP, Port: uint16(80 + v)}
				vs := &model.VirtualServer{Key: key, Reals: map[model.RSKey]uint32{}}
				for r := range rng.IntN(5) {
					vs.Reals[model.RSKey{Addr: netip.AddrFrom4([4]byte{10, 244, 0, byte(r)}), Port: 8080}] = 1
				}
				st.VSes[key] = vs
				if !st.Binds(key.Addr) {
					st.Bind = append(st.Bind, key.Addr)
				}
			}
			if rng.IntN(3) == 0 {
				st.HealthCheckNodePort = uint16(30000 + rng.IntN(100))
			}
			d.update(name, st)
		}
		reals, hc := 0, 0
		for _, vs := range d.allVSes() {
			reals += len(vs.Reals)
		}
		for n, s := range d.services {
			if s.HealthCheckNodePort != 0 {
				hc++
				if d.healthChecked[n] != s {
					t.Fatalf("step %d: %v has a health-check node port but is not indexed", step, n)
				}
			}
		}
		if d.reals != reals || len(d.healthChecked) != hc {
			t.Fatalf("step %d: counters reals=%d healthChecked=%d, recount %d and %d", step, d.reals, len(d.healthChecked), reals, hc)
		}
		for key := range d.vsOwner {
			if d.desiredVS(key) != d.allVSes()[key] {
				t.Fatalf("step %d: desiredVS(%v) differs from allVSes", step, key)
			}
		}
		for a := range d.allBinds() {
			if !d.bound(a) {
				t.Fatalf("step %d: %v is in allBinds but not bound", step, a)
			}
		}
	}
}

// nameLess orders as the names' strings do.
func TestNameLessMatchesStringOrder(t *testing.T) {
	var names []model.ServiceName
	for _, p := range [][2]string{{"a", "b"}, {"a-x", "c"}, {"a", ""}, {"", "a"}, {"ab", "c"}, {"a", "b/c"}, {"a/b", "c"}, {"kube-system", "dns"}, {"kube", "system-dns"}} {
		names = append(names, model.ServiceName{Namespace: p[0], Name: p[1]})
	}
	for _, x := range names {
		for _, y := range names {
			if got, want := nameLess(x, y), x.String() < y.String(); got != want {
				t.Errorf("nameLess(%q, %q) = %v, want %v", x, y, got, want)
			}
		}
	}
}

// A Service rebuilt unchanged (every Service, at each full sync) keeps its virtual server
// objects, which the IPVS reconciler holds as its cache: the new copies are garbage at once
// and the cluster is never held twice.
func TestUnchangedVirtualServerKeepsItsObject(t *testing.T) {
	d := newDesiredState()
	name := model.ServiceName{Namespace: "ns", Name: "a"}
	key := model.VSKey{Addr: netip.MustParseAddr("10.96.0.1"), Proto: model.TCP, Port: 80}
	build := func(port string, weight uint32) *model.ServiceState {
		return &model.ServiceState{Name: name, Bind: []netip.Addr{key.Addr}, VSes: map[model.VSKey]*model.VirtualServer{
			key: {Key: key, Spec: model.VSSpec{Scheduler: "rr"}, PortName: port,
				Reals: map[model.RSKey]uint32{{Addr: netip.MustParseAddr("10.244.0.1"), Port: 8080}: weight}}}}
	}
	d.update(name, build("http", 1))
	first := d.desiredVS(key)
	if ch := d.update(name, build("http", 1)); len(ch.vs) != 0 || d.desiredVS(key) != first {
		t.Fatalf("an unchanged rebuild: changes %v, object kept %v", ch.vs, d.desiredVS(key) == first)
	}
	if ch := d.update(name, build("web", 1)); len(ch.vs) != 0 || d.desiredVS(key) == first || d.desiredVS(key).PortName != "web" {
		t.Fatalf("a renamed port: changes %v, port %q", ch.vs, d.desiredVS(key).PortName)
	}
	if ch := d.update(name, build("web", 2)); len(ch.vs) != 1 {
		t.Fatalf("a weight change: changes %v", ch.vs)
	}
}

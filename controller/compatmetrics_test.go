package controller

import (
	"context"
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/kube-ipvs/kube-ipvs/metrics"
)

// series returns one series' value (a histogram's sample count) and whether it exists.
func series(t *testing.T, m *metrics.Metrics, name string, labels map[string]string) (float64, bool) {
	t.Helper()
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	next:
		for _, s := range f.GetMetric() {
			n := 0
			for _, lp := range s.GetLabel() {
				if v, ok := labels[lp.GetName()]; ok {
					if v != lp.GetValue() {
						continue next
					}
					n++
				}
			}
			if n != len(labels) {
				continue
			}
			switch {
			case s.GetHistogram() != nil:
				return float64(s.GetHistogram().GetSampleCount()), true
			case s.GetCounter() != nil:
				return s.GetCounter().GetValue(), true
			default:
				return s.GetGauge().GetValue(), true
			}
		}
	}
	return 0, false
}

func programmedCount(t *testing.T, m *metrics.Metrics) float64 {
	t.Helper()
	n, ok := series(t, m, "kubeproxy_network_programming_duration_seconds", map[string]string{"ip_family": metrics.IPv4})
	if !ok {
		t.Fatal("no kubeproxy_network_programming_duration_seconds{ip_family=IPv4}")
	}
	return n
}

// programmedWeb starts a controller whose metrics began an hour ago, with Service ns/web
// created and synced.
func programmedWeb(t *testing.T) (*metrics.Metrics, *harness) {
	t.Helper()
	m := metrics.New(metrics.WithoutRuntimeMetrics(), metrics.WithClock(func() time.Time { return time.Now().Add(-time.Hour) }))
	h := startHarness(t, fake.NewClientset(), Observers{Metrics: m})
	h.client.CoreV1().Services("ns").Create(context.Background(), service("web", "10.96.0.10", nil), metav1.CreateOptions{})
	h.waitDirty("web")
	if err := h.c.sync(true); err != nil {
		t.Fatal(err)
	}
	return m, h
}

func triggered(s *discoveryv1.EndpointSlice, at time.Time) *discoveryv1.EndpointSlice {
	s.Annotations = map[string]string{metrics.AnnotationLastChangeTriggerTime: at.UTC().Format(time.RFC3339Nano)}
	return s
}

// An EndpointSlice change is observed as programmed only by the sync that got the Service's
// virtual servers into the kernel: a sync where its write failed, or where a step failed as
// a whole, observes nothing, and the change is observed once, by the sync that succeeds.
// The change counters and the pending gauges follow kube-proxy's.
func TestProgrammingLatencyOnlyForProgrammedChanges(t *testing.T) {
	m, h := programmedWeb(t)
	ctx := context.Background()
	if got, _ := series(t, m, "kubeproxy_sync_proxy_rules_service_changes_total", nil); got != 1 {
		t.Errorf("service changes %v, want 1", got)
	}

	// The write of web's virtual server fails: nothing is observed.
	h.dp.failNext[vsKey("10.96.0.10", 80)] = errors.New("netlink: device or resource busy")
	h.client.DiscoveryV1().EndpointSlices("ns").Create(ctx, triggered(slice("web", "web-1", "10.244.0.1"), time.Now().Add(-2*time.Second)), metav1.CreateOptions{})
	h.waitDirty("web")
	if got, _ := series(t, m, "kubeproxy_sync_proxy_rules_endpoint_changes_pending", nil); got != 1 {
		t.Errorf("endpoint changes pending %v before the sync, want 1", got)
	}
	h.syncChanged()
	if got := programmedCount(t, m); got != 0 {
		t.Fatalf("a failed write observed %v programming latencies, want 0", got)
	}
	if got, _ := series(t, m, "kubeproxy_sync_proxy_rules_endpoint_changes_pending", nil); got != 0 {
		t.Errorf("endpoint changes pending %v after the sync took them, want 0", got)
	}
	// The retry writes it: observed once, with the time since the trigger (about 2 s).
	h.syncChanged()
	if got := programmedCount(t, m); got != 1 {
		t.Fatalf("after the retry: %v programming latencies, want 1", got)
	}

	// A step fails as a whole: nothing observed; the repair that follows observes it.
	h.dp.applyErr = errors.New("iptables-restore: exit status 4")
	h.client.DiscoveryV1().EndpointSlices("ns").Update(ctx, triggered(slice("web", "web-1", "10.244.0.1", "10.244.0.2"), time.Now()), metav1.UpdateOptions{})
	h.waitDirty("web")
	h.syncChanged()
	if got := programmedCount(t, m); got != 1 {
		t.Fatalf("a sync that failed as a whole observed: %v programming latencies, want still 1", got)
	}
	if err := h.c.sync(true); err != nil {
		t.Fatal(err)
	}
	if got := programmedCount(t, m); got != 2 {
		t.Fatalf("after the repair: %v programming latencies, want 2", got)
	}
	// A later successful sync does not observe it again.
	h.c.sync(true)
	if got := programmedCount(t, m); got != 2 {
		t.Fatalf("observed twice: %v, want 2", got)
	}
	if got, _ := series(t, m, "kubeproxy_sync_proxy_rules_endpoint_changes_total", nil); got != 2 {
		t.Errorf("endpoint changes %v, want 2", got)
	}
	syncs, _ := series(t, m, "kubeproxy_sync_proxy_rules_duration_seconds", map[string]string{"ip_family": metrics.IPv4})
	if syncs != 6 {
		t.Errorf("%v syncs observed, want 6 (failed ones too)", syncs)
	}
	if _, ok := series(t, m, "kubeproxy_sync_proxy_rules_duration_seconds", map[string]string{"ip_family": metrics.IPv6}); ok {
		t.Error("an IPv4-only node exports IPv6 syncs")
	}
}

// A Service with internalTrafficPolicy: Local whose only endpoint is on another node is
// counted under traffic_policy="internal" until an endpoint lands on this node; an
// externalTrafficPolicy: Local one under "external".
func TestNoLocalEndpointsCount(t *testing.T) {
	m := metrics.New(metrics.WithoutRuntimeMetrics())
	h := startHarness(t, fake.NewClientset(), Observers{Metrics: m})
	ctx := context.Background()
	svc := service("local", "10.96.0.20", nil)
	svc.Spec.InternalTrafficPolicy = ptr.To(corev1.ServiceInternalTrafficPolicyLocal)
	ext := service("ext", "10.96.0.21", nil)
	ext.Spec.Type = corev1.ServiceTypeNodePort
	ext.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	ext.Spec.Ports[0].NodePort = 30080
	remote := func(svc, name string) *discoveryv1.EndpointSlice {
		s := slice(svc, name, "10.244.1.1")
		s.Endpoints[0].NodeName = ptr.To("node-b")
		return s
	}
	h.client.CoreV1().Services("ns").Create(ctx, svc, metav1.CreateOptions{})
	h.client.CoreV1().Services("ns").Create(ctx, ext, metav1.CreateOptions{})
	h.client.DiscoveryV1().EndpointSlices("ns").Create(ctx, remote("local", "local-1"), metav1.CreateOptions{})
	h.client.DiscoveryV1().EndpointSlices("ns").Create(ctx, remote("ext", "ext-1"), metav1.CreateOptions{})
	h.waitSlice("local-1")
	h.waitSlice("ext-1")
	if err := h.c.sync(true); err != nil {
		t.Fatal(err)
	}
	check := func(policy string, want float64) {
		t.Helper()
		got, _ := series(t, m, "kubeproxy_sync_proxy_rules_no_local_endpoints_total", map[string]string{"traffic_policy": policy, "ip_family": metrics.IPv4})
		if got != want {
			t.Errorf("%s: %v Services without a local endpoint, want %v", policy, got, want)
		}
	}
	check(metrics.PolicyInternal, 1)
	check(metrics.PolicyExternal, 1)

	local := slice("local", "local-1", "10.244.0.1")
	local.Endpoints[0].NodeName = ptr.To("node-a")
	h.client.DiscoveryV1().EndpointSlices("ns").Update(ctx, local, metav1.UpdateOptions{})
	h.waitDirty("local")
	h.syncChanged()
	check(metrics.PolicyInternal, 0)
	check(metrics.PolicyExternal, 1)

	h.client.CoreV1().Services("ns").Delete(ctx, "ext", metav1.DeleteOptions{})
	h.waitDirty("ext")
	h.syncChanged()
	check(metrics.PolicyExternal, 0)
}

// An update that hands over a slice whose trigger time the proxy already observed (the
// informer's relist after a broken watch, or its resync) observes nothing again; one with a
// new trigger time is observed, as kube-proxy records a trigger time only for a change.
func TestProgrammingLatencyNotObservedAgainForAnUnchangedTrigger(t *testing.T) {
	m, h := programmedWeb(t)
	ctx := context.Background()
	first := triggered(slice("web", "web-1", "10.244.0.1"), time.Now().Add(-2*time.Second))
	h.client.DiscoveryV1().EndpointSlices("ns").Create(ctx, first, metav1.CreateOptions{})
	h.waitDirty("web")
	h.syncChanged()
	if got := programmedCount(t, m); got != 1 {
		t.Fatalf("after the slice's creation: %v programming latencies, want 1", got)
	}
	// The same slice handed over again, as a relist does: a new object, the same trigger.
	old := first.DeepCopy()
	h.c.onSliceUpdate(old, first.DeepCopy())
	h.syncChanged()
	if got := programmedCount(t, m); got != 1 {
		t.Fatalf("an update with the trigger time already observed was observed again: %v, want 1", got)
	}
	// A real change carries a new trigger time.
	h.client.DiscoveryV1().EndpointSlices("ns").Update(ctx, triggered(slice("web", "web-1", "10.244.0.1", "10.244.0.2"), time.Now()), metav1.UpdateOptions{})
	h.waitDirty("web")
	h.syncChanged()
	if got := programmedCount(t, m); got != 2 {
		t.Fatalf("after a change with a new trigger time: %v programming latencies, want 2", got)
	}
}

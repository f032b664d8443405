package controller

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kube-ipvs/kube-ipvs/backendcheck"
	"github.com/kube-ipvs/kube-ipvs/model"
)

// kernelWeightsOf are the weights each fake "kernel" held before the start
// (dataplane.Dataplane.RealWeights).
var kernelWeightsOf = map[*fakeDP]map[model.VSKey]map[model.RSKey]uint32{}

func (f *fakeDP) RealWeights(keys []model.VSKey) (map[model.VSKey]map[model.RSKey]uint32, error) {
	out := map[model.VSKey]map[model.RSKey]uint32{}
	for _, k := range keys {
		if w, ok := kernelWeightsOf[f][k]; ok {
			out[k] = w
		}
	}
	return out, nil
}

func ep(s string) model.RSKey {
	ap := netip.MustParseAddrPort(s)
	return model.RSKey{Addr: ap.Addr(), Port: ap.Port()}
}

// checkedHarness has one health-checked Service ns/web on 10.96.0.9 with three endpoints,
// a checker that is given the checks but never run (the test reports verdicts itself),
// and a "kernel" that held 10.244.0.2 at weight 0 before this start.
func checkedHarness(t *testing.T) (*harness, *backendcheck.Checker) {
	t.Helper()
	client := fake.NewClientset()
	ctx := context.Background()
	client.CoreV1().Services("ns").Create(ctx, service("web", "10.96.0.9", map[string]string{"kube-ipvs.io/health-check": "tcp"}), metav1.CreateOptions{})
	client.DiscoveryV1().EndpointSlices("ns").Create(ctx, slice("web", "web-1", "10.244.0.1", "10.244.0.2", "10.244.0.3"), metav1.CreateOptions{})
	ch := backendcheck.New(backendcheck.Options{})
	h := startHarnessWith(t, client, Observers{}, Config{NodeName: "node-a", DefaultScheduler: "rr", SyncPeriod: time.Hour, BackendChecks: ch})
	kernelWeightsOf[h.dp] = map[model.VSKey]map[model.RSKey]uint32{
		vsKey("10.96.0.9", 80): {ep("10.244.0.1:8080"): 1, ep("10.244.0.2:8080"): 0},
	}
	t.Cleanup(func() { delete(kernelWeightsOf, h.dp) })
	h.waitSlice("web-1")
	if err := h.c.sync(true); err != nil {
		t.Fatal(err)
	}
	return h, ch
}

func (h *harness) weights() map[model.RSKey]uint32 {
	return h.dp.vs[vsKey("10.96.0.9", 80)].Reals
}

func (h *harness) event(want string) {
	h.t.Helper()
	for {
		select {
		case e := <-h.recorder.Events:
			if strings.Contains(e, want) {
				return
			}
		default:
			h.t.Fatalf("no event %q", want)
		}
	}
}

var web = model.ServiceName{Namespace: "ns", Name: "web"}

func TestRestartKeepsKernelWeightZeroUntilAVerdict(t *testing.T) {
	h, ch := checkedHarness(t)
	w := h.weights()
	if w[ep("10.244.0.1:8080")] != 1 || w[ep("10.244.0.2:8080")] != 0 || w[ep("10.244.0.3:8080")] != 1 {
		t.Fatalf("after restart weights %v: .2 must stay 0, .1 and the new .3 weight 1", w)
	}
	snap := ch.Snapshot(web)
	if len(snap) != 3 || snap[1].Healthy || snap[1].Checks != 0 || !snap[0].Healthy {
		t.Fatalf("checker state %+v: .2 must start unhealthy, unconfirmed", snap)
	}
	h.c.onVerdict(backendcheck.Verdict{Service: web, Endpoint: ep("10.244.0.2:8080"), Healthy: true})
	if st := h.syncChanged(); st.Full || st.Services != 1 || st.IPVSWrites != 1 {
		t.Fatalf("a verdict must be one incremental write: %+v", st)
	}
	if h.weights()[ep("10.244.0.2:8080")] != 1 {
		t.Fatalf("weights %v after .2 passed", h.weights())
	}
}

func TestVerdictsChangeWeightsIncrementallyAndFailOpen(t *testing.T) {
	h, _ := checkedHarness(t)
	h.c.onVerdict(backendcheck.Verdict{Service: web, Endpoint: ep("10.244.0.2:8080"), Healthy: true})
	h.syncChanged()
	h.c.onVerdict(backendcheck.Verdict{Service: web, Endpoint: ep("10.244.0.1:8080"), Healthy: false, Err: "refused"})
	if st := h.syncChanged(); st.Full || st.Services != 1 || st.IPVSWrites != 1 {
		t.Fatalf("unhealthy verdict: %+v", st)
	}
	if w := h.weights(); w[ep("10.244.0.1:8080")] != 0 || w[ep("10.244.0.3:8080")] != 1 {
		t.Fatalf("weights %v", w)
	}
	// Events are rate-limited per Service: .2's came first, .1's within checkEventGap is
	// held back and counted in the next one.
	h.event("Normal EndpointHealthy endpoint 10.244.0.2:8080 passes")
	select {
	case e := <-h.recorder.Events:
		t.Fatalf("a second state-change Event within %v: %q", checkEventGap, e)
	default:
	}

	// Every endpoint fails: all keep weight 1, and the Service is told.
	h.c.checks.nextEvent[web] = time.Time{} // the gap has passed
	h.c.onVerdict(backendcheck.Verdict{Service: web, Endpoint: ep("10.244.0.2:8080"), Healthy: false, Err: "refused"})
	h.c.onVerdict(backendcheck.Verdict{Service: web, Endpoint: ep("10.244.0.3:8080"), Healthy: false})
	h.syncChanged()
	h.event("Warning EndpointUnhealthy endpoint 10.244.0.2:8080 fails its health check (refused); weight 0, established connections stay (1 earlier changes not shown")
	for rs, w := range h.weights() {
		if w != 1 {
			t.Fatalf("fail open: %s has weight %d", rs, w)
		}
	}
	h.event("Warning HealthCheckFailOpen all 3 endpoints")

	// A verdict for an endpoint that left the Service is dropped.
	h.c.onVerdict(backendcheck.Verdict{Service: web, Endpoint: ep("10.244.9.9:8080"), Healthy: false})
	h.syncChanged()
	if h.c.checks.unhealthy[web][ep("10.244.9.9:8080")] {
		t.Fatal("stale verdict kept")
	}
}

func TestUncheckedServiceIsForgotten(t *testing.T) {
	h, ch := checkedHarness(t)
	h.client.CoreV1().Services("ns").Update(context.Background(), service("web", "10.96.0.9", nil), metav1.UpdateOptions{})
	h.waitDirty("web")
	h.syncChanged()
	if ch.Snapshot(web) != nil || h.c.checks.targets[web] != nil || h.c.checks.unhealthy[web] != nil {
		t.Fatalf("a Service without the annotation is still checked")
	}
	if w := h.weights(); w[ep("10.244.0.2:8080")] != 1 {
		t.Fatalf("weights %v: without checks every endpoint has weight 1", w)
	}
}

// In the iptables fallback mode the checks cannot weigh endpoints: the Service is told.
func TestHealthCheckInIPTablesModeRaisesAnEvent(t *testing.T) {
	client := fake.NewClientset()
	client.CoreV1().Services("ns").Create(context.Background(), service("web", "10.96.0.9", map[string]string{"kube-ipvs.io/health-check": "tcp"}), metav1.CreateOptions{})
	h := startHarnessWith(t, client, Observers{}, Config{NodeName: "node-a", DefaultScheduler: "rr", SyncPeriod: time.Hour, NoSchedulers: true})
	if err := h.c.sync(true); err != nil {
		t.Fatal(err)
	}
	h.event("Warning HealthCheckIgnored")
	if h.c.checks.targets[web] != nil {
		t.Fatal("no checker, yet the Service is tracked")
	}
}

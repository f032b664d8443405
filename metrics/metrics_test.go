package metrics

import (
	"context"
	"errors"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/kube-ipvs/kube-ipvs/model"
)

var t0 = time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)

func newTestMetrics() *Metrics {
	return New(WithClock(func() time.Time { return t0 }), WithoutRuntimeMetrics())
}

// histogram returns the sample count and sum of one histogram series.
func histogram(t *testing.T, g prometheus.Gatherer, name string, labels map[string]string) (uint64, float64) {
	t.Helper()
	fams, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if matchLabels(m, labels) {
				return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
			}
		}
	}
	t.Fatalf("no %s%v", name, labels)
	return 0, 0
}

// bucketCount returns the cumulative count of the bucket with upper bound le.
func bucketCount(t *testing.T, g prometheus.Gatherer, name string, le float64) uint64 {
	t.Helper()
	fams, _ := g.Gather()
	for _, f := range fams {
		if f.GetName() == name {
			for _, b := range f.GetMetric()[0].GetHistogram().GetBucket() {
				if b.GetUpperBound() == le {
					return b.GetCumulativeCount()
				}
			}
		}
	}
	t.Fatalf("no bucket le=%v in %s", le, name)
	return 0
}

func matchLabels(m *dto.Metric, want map[string]string) bool {
	n := 0
	for _, lp := range m.GetLabel() {
		if v, ok := want[lp.GetName()]; ok {
			if v != lp.GetValue() {
				return false
			}
			n++
		}
	}
	return n == len(want)
}

func TestSyncDone(t *testing.T) {
	m := newTestMetrics()
	for _, k := range []string{KindFull, KindPartial} {
		if n, _ := histogram(t, m.Registry(), "kube_ipvs_sync_duration_seconds", map[string]string{"kind": k}); n != 0 {
			t.Errorf("%s before any sync: %d samples", k, n)
		}
	}
	if v := testutil.ToFloat64(m.lastSuccessfulSync); v != 0 {
		t.Errorf("last sync before any: %v", v)
	}

	end := time.Unix(1700000000, 250_000_000)
	m.SyncDone(true, 1500*time.Millisecond, true, end)
	m.SyncDone(false, 2*time.Millisecond, true, end.Add(time.Second))
	m.SyncDone(false, 3*time.Millisecond, false, end.Add(2*time.Second))

	n, sum := histogram(t, m.Registry(), "kube_ipvs_sync_duration_seconds", map[string]string{"kind": "full"})
	if n != 1 || sum != 1.5 {
		t.Errorf("full: count %d sum %v, want 1 and 1.5", n, sum)
	}
	n, sum = histogram(t, m.Registry(), "kube_ipvs_sync_duration_seconds", map[string]string{"kind": "partial"})
	if n != 2 || math.Abs(sum-0.005) > 1e-12 {
		t.Errorf("partial: count %d sum %v, want 2 and 0.005", n, sum)
	}
	// The failed sync did not move the timestamp.
	if v := testutil.ToFloat64(m.lastSuccessfulSync); v != 1700000001.25 {
		t.Errorf("last successful sync = %v, want 1700000001.25", v)
	}
}

func TestPendingChanges(t *testing.T) {
	m := newTestMetrics()
	m.SetPendingChanges(12)
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(`
# HELP kube_ipvs_pending_changes Services with changes queued for the next sync.
# TYPE kube_ipvs_pending_changes gauge
kube_ipvs_pending_changes 12
`), "kube_ipvs_pending_changes"); err != nil {
		t.Error(err)
	}
	m.SetPendingChanges(0)
	if v := testutil.ToFloat64(m.pendingChanges); v != 0 {
		t.Errorf("pending = %v", v)
	}
}

func TestObserveProgramming(t *testing.T) {
	now := t0.Add(time.Hour)
	tests := []struct {
		name    string
		trigger string
		ok      bool
		seconds float64
	}{
		{"absent", "", false, 0},
		{"garbage", "yesterday", false, 0},
		{"not RFC 3339", "2026-05-06 08:00:00", false, 0},
		{"before the proxy started", t0.Add(-time.Second).Format(time.RFC3339), false, 0},
		{"whole seconds", now.Add(-3 * time.Second).Format(time.RFC3339), true, 3},
		{"fractional seconds", now.Add(-1250 * time.Millisecond).Format(time.RFC3339Nano), true, 1.25},
		{"other time zone", now.Add(-90 * time.Second).In(time.FixedZone("x", 5*3600)).Format(time.RFC3339), true, 90},
		{"in the future (clock skew)", now.Add(2 * time.Second).Format(time.RFC3339), true, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := newTestMetrics()
			if got := m.ObserveProgramming(tc.trigger, IPv6, now); got != tc.ok {
				t.Errorf("ObserveProgramming(%q) = %v, want %v", tc.trigger, got, tc.ok)
			}
			n, sum := histogram(t, m.Registry(), "kube_ipvs_network_programming_duration_seconds", nil)
			wantN := uint64(0)
			if tc.ok {
				wantN = 1
			}
			if n != wantN || math.Abs(sum-tc.seconds) > 1e-9 {
				t.Errorf("count %d sum %v, want %d and %v", n, sum, wantN, tc.seconds)
			}
			// kube-proxy's name gets the same value, under the slice's family.
			n, sum = histogramOrZero(t, m.Registry(), "kubeproxy_network_programming_duration_seconds", map[string]string{"ip_family": IPv6})
			if n != wantN || math.Abs(sum-tc.seconds) > 1e-9 {
				t.Errorf("kubeproxy_: count %d sum %v, want %d and %v", n, sum, wantN, tc.seconds)
			}
		})
	}

	m := newTestMetrics()
	m.ObserveProgramming(now.Add(-800*time.Millisecond).Format(time.RFC3339Nano), IPv4, now)
	m.ObserveProgramming(now.Add(-12*time.Second).Format(time.RFC3339Nano), IPv4, now)
	if got := bucketCount(t, m.Registry(), "kube_ipvs_network_programming_duration_seconds", 1); got != 1 {
		t.Errorf("le=1 bucket: %d, want 1", got)
	}
	if got := bucketCount(t, m.Registry(), "kube_ipvs_network_programming_duration_seconds", 15); got != 2 {
		t.Errorf("le=15 bucket: %d, want 2", got)
	}
}

func TestNetlinkWritesAndKernelErrors(t *testing.T) {
	m := newTestMetrics()
	m.AddNetlinkWrites(SubsystemIPVS, OpAdd, 3)
	m.AddNetlinkWrites(SubsystemIPVS, OpAdd, 2)
	m.AddNetlinkWrites(SubsystemIPVS, OpDelete, 1)
	m.AddNetlinkWrites(SubsystemAddress, OpAdd, 4)
	m.AddNetlinkWrites(SubsystemIPSet, OpUpdate, 0)  // ignored
	m.AddNetlinkWrites(SubsystemIPSet, OpUpdate, -1) // ignored
	m.AddNetlinkWrites(SubsystemIPTables, "restore", 1)
	m.AddKernelErrors(SubsystemIPVS, 2)
	m.AddKernelErrors(SubsystemAddress, 1)
	m.AddKernelErrors(SubsystemIPSet, 0)

	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(`
# HELP kube_ipvs_netlink_writes_total Kernel write calls made, by subsystem (ipvs, address, ipset, iptables) and operation.
# TYPE kube_ipvs_netlink_writes_total counter
kube_ipvs_netlink_writes_total{operation="add",subsystem="address"} 4
kube_ipvs_netlink_writes_total{operation="add",subsystem="ipset"} 0
kube_ipvs_netlink_writes_total{operation="add",subsystem="iptables"} 0
kube_ipvs_netlink_writes_total{operation="add",subsystem="ipvs"} 5
kube_ipvs_netlink_writes_total{operation="delete",subsystem="address"} 0
kube_ipvs_netlink_writes_total{operation="delete",subsystem="ipset"} 0
kube_ipvs_netlink_writes_total{operation="delete",subsystem="iptables"} 0
kube_ipvs_netlink_writes_total{operation="delete",subsystem="ipvs"} 1
kube_ipvs_netlink_writes_total{operation="restore",subsystem="iptables"} 1
kube_ipvs_netlink_writes_total{operation="update",subsystem="address"} 0
kube_ipvs_netlink_writes_total{operation="update",subsystem="ipset"} 0
kube_ipvs_netlink_writes_total{operation="update",subsystem="iptables"} 0
kube_ipvs_netlink_writes_total{operation="update",subsystem="ipvs"} 0
# HELP kube_ipvs_kernel_errors_total Kernel calls that failed, by subsystem.
# TYPE kube_ipvs_kernel_errors_total counter
kube_ipvs_kernel_errors_total{subsystem="address"} 1
kube_ipvs_kernel_errors_total{subsystem="ipset"} 0
kube_ipvs_kernel_errors_total{subsystem="iptables"} 0
kube_ipvs_kernel_errors_total{subsystem="ipvs"} 2
`), "kube_ipvs_netlink_writes_total", "kube_ipvs_kernel_errors_total"); err != nil {
		t.Error(err)
	}
	if v := testutil.ToFloat64(m.netlinkWrites.WithLabelValues(SubsystemIPVS, OpAdd)); v != 5 {
		t.Errorf("ipvs add = %v", v)
	}
}

func TestDesiredState(t *testing.T) {
	m := newTestMetrics()
	m.SetDesiredState(DesiredState{VirtualServers: 30, RealServers: 90, VIPs: 12, IPSetEntries: 7})
	want := `
# HELP kube_ipvs_ipset_entries ipset entries in the desired state, summed over sets.
# TYPE kube_ipvs_ipset_entries gauge
kube_ipvs_ipset_entries 7
# HELP kube_ipvs_real_servers IPVS real servers in the desired state, summed over virtual servers.
# TYPE kube_ipvs_real_servers gauge
kube_ipvs_real_servers 90
# HELP kube_ipvs_vips Service addresses bound to the dummy interface in the desired state.
# TYPE kube_ipvs_vips gauge
kube_ipvs_vips 12
# HELP kube_ipvs_virtual_servers IPVS virtual servers in the desired state.
# TYPE kube_ipvs_virtual_servers gauge
kube_ipvs_virtual_servers 30
`
	names := []string{"kube_ipvs_virtual_servers", "kube_ipvs_real_servers", "kube_ipvs_vips", "kube_ipvs_ipset_entries"}
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
	m.SetDesiredState(DesiredState{VirtualServers: 1})
	for g, v := range map[prometheus.Gauge]float64{m.virtualServers: 1, m.realServers: 0, m.vips: 0, m.ipsetEntries: 0} {
		if got := testutil.ToFloat64(g); got != v {
			t.Errorf("after shrinking: %v, want %v", got, v)
		}
	}
}

func TestProxyMode(t *testing.T) {
	m := newTestMetrics()
	expect := func(ipvs, iptables string) {
		t.Helper()
		if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(`
# HELP kube_ipvs_proxy_mode 1 for the proxy mode in use (ipvs, or the iptables fallback), 0 for the others.
# TYPE kube_ipvs_proxy_mode gauge
kube_ipvs_proxy_mode{mode="iptables"} `+iptables+`
kube_ipvs_proxy_mode{mode="ipvs"} `+ipvs+`
`), "kube_ipvs_proxy_mode"); err != nil {
			t.Error(err)
		}
	}
	expect("0", "0")
	m.SetProxyMode(ModeIPVS)
	expect("1", "0")
	m.SetProxyMode(ModeIPTables)
	expect("0", "1")
	m.SetProxyMode(ModeIPVS)
	expect("1", "0")
	m.SetProxyMode("nftables")
	if v := testutil.ToFloat64(m.proxyMode.WithLabelValues("nftables")); v != 1 {
		t.Errorf("nftables = %v", v)
	}
	if v := testutil.ToFloat64(m.proxyMode.WithLabelValues(ModeIPVS)); v != 0 {
		t.Errorf("ipvs after switching away = %v", v)
	}
}

func TestInvalidAnnotations(t *testing.T) {
	m := newTestMetrics()
	if n := testutil.CollectAndCount(m.invalidAnnotations); n != 0 {
		t.Errorf("%d series before any", n)
	}
	m.InvalidAnnotation("InvalidScheduler")
	m.InvalidAnnotation("InvalidScheduler")
	m.InvalidAnnotation("InvalidSchedulerFlags")
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(`
# HELP kube_ipvs_invalid_annotations_total Service annotations that were rejected and replaced by a default, by reason.
# TYPE kube_ipvs_invalid_annotations_total counter
kube_ipvs_invalid_annotations_total{reason="InvalidScheduler"} 2
kube_ipvs_invalid_annotations_total{reason="InvalidSchedulerFlags"} 1
`), "kube_ipvs_invalid_annotations_total"); err != nil {
		t.Error(err)
	}
}

func TestPrivateRegistryAndLint(t *testing.T) {
	m := New()
	m.SyncDone(true, time.Second, true, time.Now())
	fams, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if strings.HasPrefix(f.GetName(), Namespace) {
			t.Errorf("%s is on the default registry", f.GetName())
		}
	}
	got, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var ours, kubeProxy, runtime int
	for _, f := range got {
		switch {
		case strings.HasPrefix(f.GetName(), Namespace+"_"):
			ours++
		case strings.HasPrefix(f.GetName(), CompatSubsystem+"_"):
			kubeProxy++
		case strings.HasPrefix(f.GetName(), "go_"), strings.HasPrefix(f.GetName(), "process_"):
			runtime++
		default:
			t.Errorf("unexpected family %s", f.GetName())
		}
	}
	// invalid_annotations_total has no series until a first reason is counted.
	if ours != 16 || runtime == 0 {
		t.Errorf("%d kube_ipvs families (want 16), %d runtime families", ours, runtime)
	}
	// kube-proxy's health counters have no series until a first probe is answered.
	if kubeProxy != 9 {
		t.Errorf("%d kubeproxy families, want 9", kubeProxy)
	}
	lint(t, newTestMetrics().Registry())
}

// lint fails on every problem promlint finds but one: kube-proxy names a gauge
// kubeproxy_sync_proxy_rules_no_local_endpoints_total, and the name must stay kube-proxy's.
func lint(t *testing.T, g prometheus.Gatherer) {
	t.Helper()
	problems, err := testutil.GatherAndLint(g)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		if p.Metric == "kubeproxy_sync_proxy_rules_no_local_endpoints_total" && strings.Contains(p.Text, `"_total" suffix`) {
			continue
		}
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}

func TestHandler(t *testing.T) {
	m := newTestMetrics()
	m.SetPendingChanges(3)
	if err := m.EnableServiceStats(func() ([]VSStats, error) { return nil, errors.New("netlink: no such file") },
		func(model.VSKey) (model.ServiceName, string, bool) { return model.ServiceName{}, "", false }, StatsLimits{}); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	for _, want := range []string{
		"kube_ipvs_pending_changes 3",
		`kube_ipvs_service_stats_errors_total{reason="source"} 1`,
		`kube_ipvs_proxy_mode{mode="ipvs"} 0`,
		"# TYPE kube_ipvs_sync_duration_seconds histogram",
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("scrape lacks %q:\n%s", want, body)
		}
	}
	if err := m.EnableServiceStats(nil, nil, StatsLimits{}); err == nil {
		t.Error("second EnableServiceStats: want an error")
	}
}

func TestServe(t *testing.T) {
	var mu sync.Mutex
	var addr string
	listen := func(network, a string) (net.Listener, error) {
		if a != DefaultAddress {
			return nil, errors.New("unexpected address " + a)
		}
		ln, err := net.Listen(network, "127.0.0.1:0")
		if err == nil {
			mu.Lock()
			addr = ln.Addr().String()
			mu.Unlock()
		}
		return ln, err
	}
	m := New(WithListen(listen), WithoutRuntimeMetrics())
	m.SetDesiredState(DesiredState{VirtualServers: 5})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Serve(ctx, DefaultAddress) }()

	var body string
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		mu.Lock()
		a := addr
		mu.Unlock()
		if a != "" {
			if err := testutil.ScrapeAndCompare("http://"+a+"/metrics", strings.NewReader(`
# HELP kube_ipvs_virtual_servers IPVS virtual servers in the desired state.
# TYPE kube_ipvs_virtual_servers gauge
kube_ipvs_virtual_servers 5
`), "kube_ipvs_virtual_servers"); err == nil {
				body = "ok"
				break
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	if body == "" {
		t.Fatal("never scraped the served metrics")
	}
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get("/proxyMode"); code != http.StatusServiceUnavailable {
		t.Errorf("/proxyMode before the mode is set: %d, want 503", code)
	}
	m.SetProxyMode(ModeIPTables)
	if code, body := get("/proxyMode"); code != http.StatusOK || body != "iptables" {
		t.Errorf("/proxyMode after a fallback: %d %q, want 200 \"iptables\"", code, body)
	}
	m.SetProxyMode(ModeIPVS)
	if code, body := get("/proxyMode"); code != http.StatusOK || body != "ipvs" {
		t.Errorf("/proxyMode: %d %q, want 200 \"ipvs\"", code, body)
	}
	if code, body := get("/healthz"); code != http.StatusOK || body != "ok" {
		t.Errorf("/healthz: %d %q, want 200 \"ok\"", code, body)
	}
	if resp, err := http.Get("http://" + addr + "/other"); err == nil {
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("/other: %d", resp.StatusCode)
		}
		resp.Body.Close()
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Serve: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return")
	}
	if _, err := http.Get("http://" + addr + "/metrics"); err == nil {
		t.Error("still serving after shutdown")
	}

	boom := errors.New("in use")
	m = New(WithListen(func(string, string) (net.Listener, error) { return nil, boom }))
	if err := m.Serve(context.Background(), DefaultAddress); !errors.Is(err, boom) {
		t.Errorf("Serve with a failing listen = %v", err)
	}
}

func TestConcurrentUse(t *testing.T) {
	m := newTestMetrics()
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 200 {
				m.SyncDone(j%2 == 0, time.Millisecond, true, time.Now())
				m.SetPendingChanges(j)
				m.AddNetlinkWrites(SubsystemIPVS, OpUpdate, 1)
				m.SetProxyMode([]string{ModeIPVS, ModeIPTables}[(i+j)%2])
				m.ObserveProgramming(t0.Add(time.Second).Format(time.RFC3339), IPv4, t0.Add(2*time.Second))
			}
		}()
	}
	for range 20 {
		resp, err := http.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	wg.Wait()
	if v := testutil.ToFloat64(m.netlinkWrites.WithLabelValues(SubsystemIPVS, OpUpdate)); v != 800 {
		t.Errorf("writes = %v, want 800", v)
	}
}

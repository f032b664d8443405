package metrics

import (
	"context"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	clientmetrics "k8s.io/client-go/tools/metrics"
)

// histogramOrZero is histogram, with 0, 0 for a series that does not exist.
func histogramOrZero(t *testing.T, g prometheus.Gatherer, name string, labels map[string]string) (uint64, float64) {
	t.Helper()
	fams, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			if f.GetName() == name && matchLabels(m, labels) {
				return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
			}
		}
	}
	return 0, 0
}

// kube-proxy v1.37's definitions (pkg/proxy/metrics/metrics.go), written out literally so
// that a change on either side shows: the type, the label names and, for histograms, the
// bucket upper bounds.
type kpDef struct {
	typ     dto.MetricType
	labels  []string
	buckets []float64
}

func kubeProxyDefs() map[string]kpDef {
	syncB := []float64{0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 0.256, 0.512, 1.024, 2.048, 4.096, 8.192, 16.384}
	progB := []float64{0, 0.25, 0.5}
	for s := 1.0; s <= 59; s++ {
		progB = append(progB, s)
	}
	for s := 60.0; s <= 115; s += 5 {
		progB = append(progB, s)
	}
	progB = append(progB, 120, 150, 180, 210, 240, 270, 300)
	h, g, c := dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE, dto.MetricType_COUNTER
	return map[string]kpDef{
		"kubeproxy_sync_proxy_rules_duration_seconds":              {h, []string{"ip_family"}, syncB},
		"kubeproxy_network_programming_duration_seconds":           {h, []string{"ip_family"}, progB},
		"kubeproxy_sync_proxy_rules_last_timestamp_seconds":        {g, []string{"ip_family"}, nil},
		"kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds": {g, []string{"ip_family"}, nil},
		"kubeproxy_sync_proxy_rules_endpoint_changes_pending":      {g, nil, nil},
		"kubeproxy_sync_proxy_rules_endpoint_changes_total":        {c, nil, nil},
		"kubeproxy_sync_proxy_rules_service_changes_pending":       {g, nil, nil},
		"kubeproxy_sync_proxy_rules_service_changes_total":         {c, nil, nil},
		"kubeproxy_sync_proxy_rules_no_local_endpoints_total":      {g, []string{"ip_family", "traffic_policy"}, nil},
		"kubeproxy_proxy_healthz_total":                            {c, []string{"code"}, nil},
		"kubeproxy_proxy_livez_total":                              {c, []string{"code"}, nil},
		"rest_client_requests_total":                               {c, []string{"code", "host", "method"}, nil},
		"rest_client_request_duration_seconds":                     {h, []string{"host", "verb"}, []float64{0.005, 0.025, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60}},
	}
}

// checkDef fails unless every series of f has def's type, label names and buckets.
func checkDef(t *testing.T, f *dto.MetricFamily, def kpDef) {
	t.Helper()
	if f.GetType() != def.typ {
		t.Errorf("%s: type %v, want %v", f.GetName(), f.GetType(), def.typ)
	}
	for _, m := range f.GetMetric() {
		var names []string
		for _, lp := range m.GetLabel() {
			names = append(names, lp.GetName())
		}
		if !slices.Equal(names, def.labels) {
			t.Errorf("%s: labels %v, want %v", f.GetName(), names, def.labels)
		}
		if def.buckets == nil {
			continue
		}
		var bounds []float64
		for _, b := range m.GetHistogram().GetBucket() {
			bounds = append(bounds, b.GetUpperBound())
		}
		if !slices.Equal(bounds, def.buckets) {
			t.Errorf("%s: buckets %v, want %v", f.GetName(), bounds, def.buckets)
		}
	}
}

// Every kube-proxy metric kube-ipvs exports has kube-proxy's type, labels and buckets, and
// exists from the start for each family served (a dashboard finds it before any event),
// except the REST client's, which exist once the client made a request.
func TestKubeProxyMetricDefinitions(t *testing.T) {
	m := newTestMetrics()
	if err := m.EnableRESTClientMetrics(); err != nil {
		t.Fatal(err)
	}
	m.SetIPFamilies([]string{IPv4, IPv6})
	m.ProxyHealthServed(false, 200)
	m.ProxyHealthServed(true, 503)
	clientmetrics.RequestResult.Increment(context.Background(), "200", "GET", "10.0.0.1:6443")
	clientmetrics.RequestLatency.Observe(context.Background(), "GET", url.URL{Host: "10.0.0.1:6443"}, 30*time.Millisecond)

	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	defs := kubeProxyDefs()
	seen := map[string]bool{}
	for _, f := range fams {
		if def, ok := defs[f.GetName()]; ok {
			seen[f.GetName()] = true
			checkDef(t, f, def)
			if slices.Contains(def.labels, "ip_family") {
				var fams []string
				for _, m := range f.GetMetric() {
					for _, lp := range m.GetLabel() {
						if lp.GetName() == "ip_family" && !slices.Contains(fams, lp.GetValue()) {
							fams = append(fams, lp.GetValue())
						}
					}
				}
				slices.Sort(fams)
				if !slices.Equal(fams, []string{IPv4, IPv6}) {
					t.Errorf("%s: ip_family values %v, want IPv4 and IPv6", f.GetName(), fams)
				}
			}
		}
	}
	for name := range defs {
		if !seen[name] {
			t.Errorf("%s is not exported", name)
		}
	}
}

// The values mean what kube-proxy's mean: a change counts and sets the queued time, a sync
// observes its duration under each family and, applied, sets the last sync time; a failed
// one leaves that time alone.
func TestKubeProxyMetricValues(t *testing.T) {
	m := newTestMetrics()
	m.SetIPFamilies([]string{IPv4, IPv6})
	at := t0.Add(90 * time.Second)
	m.QueuedChange(ChangeService, at)
	m.QueuedChange(ChangeEndpoint, at)
	m.QueuedChange(ChangeEndpoint, at)
	m.QueuedChange(ChangeOther, at.Add(time.Second))
	if got := testutil.ToFloat64(m.compat.svcTotal); got != 1 {
		t.Errorf("service changes total %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.compat.epTotal); got != 2 {
		t.Errorf("endpoint changes total %v, want 2", got)
	}
	for _, f := range []string{IPv4, IPv6} {
		if got := testutil.ToFloat64(m.compat.lastQueued.WithLabelValues(f)); got != unixSeconds(at.Add(time.Second)) {
			t.Errorf("last queued %s = %v, want %v", f, got, unixSeconds(at.Add(time.Second)))
		}
	}
	m.SetChangesPending(1, 2)
	if s, e := testutil.ToFloat64(m.compat.svcPending), testutil.ToFloat64(m.compat.epPending); s != 1 || e != 2 {
		t.Errorf("pending services %v endpoints %v, want 1 and 2", s, e)
	}

	end := at.Add(3 * time.Second)
	m.KubeProxySyncDone(20*time.Millisecond, true, end)
	m.KubeProxySyncDone(5*time.Second, false, end.Add(time.Minute))
	for _, f := range []string{IPv4, IPv6} {
		n, sum := histogram(t, m.Registry(), "kubeproxy_sync_proxy_rules_duration_seconds", map[string]string{"ip_family": f})
		if n != 2 || sum < 5.019 || sum > 5.021 {
			t.Errorf("%s: %d syncs summing %v s, want 2 and 5.02", f, n, sum)
		}
		if got := testutil.ToFloat64(m.compat.lastSync.WithLabelValues(f)); got != unixSeconds(end) {
			t.Errorf("%s: last sync %v, want the applied sync's end %v", f, got, unixSeconds(end))
		}
	}

	m.SetNoLocalEndpoints([2]NoLocalEndpoints{{Internal: 3, External: 1}, {External: 2}})
	for _, tc := range []struct {
		policy, family string
		want           float64
	}{{PolicyInternal, IPv4, 3}, {PolicyExternal, IPv4, 1}, {PolicyInternal, IPv6, 0}, {PolicyExternal, IPv6, 2}} {
		if got := testutil.ToFloat64(m.compat.noLocal.WithLabelValues(tc.policy, tc.family)); got != tc.want {
			t.Errorf("no local endpoints %s %s = %v, want %v", tc.policy, tc.family, got, tc.want)
		}
	}

	m.ProxyHealthServed(false, 200)
	m.ProxyHealthServed(false, 503)
	m.ProxyHealthServed(false, 503)
	m.ProxyHealthServed(true, 200)
	if a, b, c := testutil.ToFloat64(m.compat.healthz.WithLabelValues("200")), testutil.ToFloat64(m.compat.healthz.WithLabelValues("503")),
		testutil.ToFloat64(m.compat.livez.WithLabelValues("200")); a != 1 || b != 2 || c != 1 {
		t.Errorf("healthz 200=%v 503=%v livez 200=%v, want 1, 2, 1", a, b, c)
	}
}

// A single-stack proxy exports its one family only: a dual-stack dashboard would
// otherwise sum a family the node never syncs.
func TestKubeProxyMetricsOneFamily(t *testing.T) {
	m := newTestMetrics()
	m.SetIPFamilies([]string{IPv6})
	m.KubeProxySyncDone(time.Millisecond, true, t0)
	if n, _ := histogramOrZero(t, m.Registry(), "kubeproxy_sync_proxy_rules_duration_seconds", map[string]string{"ip_family": IPv6}); n != 1 {
		t.Errorf("IPv6 syncs %d, want 1", n)
	}
	if n, _ := histogramOrZero(t, m.Registry(), "kubeproxy_sync_proxy_rules_duration_seconds", map[string]string{"ip_family": IPv4}); n != 0 {
		t.Errorf("IPv4 syncs %d on an IPv6 proxy, want 0", n)
	}
}

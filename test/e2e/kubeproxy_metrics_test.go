//go:build guest

package e2e

import (
	"bufio"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The metric names kube-proxy's users query, and where. The kube-prometheus mixin
// (kubernetes-monitoring/kubernetes-mixin): its Proxy dashboard (dashboards/proxy.libsonnet)
// draws the rules sync rate and 99th percentile from
// kubeproxy_sync_proxy_rules_duration_seconds_count and _bucket by (instance, le), the
// network programming rate and 99th percentile from
// kubeproxy_network_programming_duration_seconds_count and _bucket by (instance, le), the API
// request rate from rest_client_requests_total{code=~"2..".."5.."}, the POST and GET latency
// from rest_client_request_duration_seconds_bucket{verb=...} by (verb, url, le), and memory,
// CPU and goroutines from process_resident_memory_bytes, process_cpu_seconds_total and
// go_goroutines; its instance variable lists the instances of
// kubeproxy_network_programming_duration_seconds_bucket. Its KubeProxyDown and
// KubeProxyInstanceUnreachable alerts (alerts/kube_proxy.libsonnet) read only `up` for the
// job the scrape selector makes: deploy/kube-proxy-compat gives the Pods the labels it
// selects (checked by test/kustomize). ClusterLoader2's NetworkProgrammingLatency measurement
// (kubernetes/perf-tests, clusterloader2/pkg/measurement/common/slos/network_programming.go)
// reads the recording rule kubeproxy:kubeproxy_network_programming_duration:histogram_quantile,
// which its prometheus-rules.yaml computes from
// kubeproxy_network_programming_duration_seconds_bucket summed by le.
//
// Each family's type, label names (besides le) and bucket bounds are kube-proxy v1.37's.
var kubeProxyUsers = []struct {
	family, typ string
	labels      []string
	buckets     []float64
	// apiClient: exported only by a proxy with a real API client (not --manifests); its
	// definition is checked by the metrics package's tests with a real client-go request.
	apiClient bool
}{
	{"kubeproxy_sync_proxy_rules_duration_seconds", "histogram", []string{"ip_family"}, syncBuckets, false},
	{"kubeproxy_network_programming_duration_seconds", "histogram", []string{"ip_family"}, programmingBuckets(), false},
	{"rest_client_requests_total", "counter", []string{"code", "host", "method"}, nil, true},
	{"rest_client_request_duration_seconds", "histogram", []string{"host", "verb"}, []float64{0.005, 0.025, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60}, true},
	{"process_resident_memory_bytes", "gauge", nil, nil, false},
	{"process_cpu_seconds_total", "counter", nil, nil, false},
	{"go_goroutines", "gauge", nil, nil, false},
}

// The rest of kube-proxy's IPVS-mode metrics that kube-ipvs exports, for its own alerts and
// dashboards: each must be on the scrape with kube-proxy's type and labels.
var kubeProxyOthers = []struct {
	family, typ string
	labels      []string
}{
	{"kubeproxy_sync_proxy_rules_last_timestamp_seconds", "gauge", []string{"ip_family"}},
	{"kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds", "gauge", []string{"ip_family"}},
	{"kubeproxy_sync_proxy_rules_endpoint_changes_pending", "gauge", nil},
	{"kubeproxy_sync_proxy_rules_endpoint_changes_total", "counter", nil},
	{"kubeproxy_sync_proxy_rules_service_changes_pending", "gauge", nil},
	{"kubeproxy_sync_proxy_rules_service_changes_total", "counter", nil},
	{"kubeproxy_sync_proxy_rules_no_local_endpoints_total", "gauge", []string{"ip_family", "traffic_policy"}},
	{"kubeproxy_proxy_healthz_total", "counter", []string{"code"}},
	{"kubeproxy_proxy_livez_total", "counter", []string{"code"}},
}

var syncBuckets = []float64{0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 0.256, 0.512, 1.024, 2.048, 4.096, 8.192, 16.384}

func programmingBuckets() []float64 {
	b := []float64{0, 0.25, 0.5}
	for s := 1.0; s < 60; s++ {
		b = append(b, s)
	}
	for s := 60.0; s < 120; s += 5 {
		b = append(b, s)
	}
	return append(b, 120, 150, 180, 210, 240, 270, 300)
}

// sample is one line of the text exposition format.
type sample struct {
	name   string
	labels map[string]string
	value  float64
}

// scrape is a parsed /metrics: each family's TYPE, and its samples.
type scrape struct {
	types   map[string]string
	samples []sample
}

var sampleLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$`)
var labelPair = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)

func scrapeMetrics(t *testing.T) scrape {
	t.Helper()
	code, _, body := httpGet(t, "http://127.0.0.1:10249/metrics")
	if code != 200 {
		t.Fatalf("/metrics answered %d", code)
	}
	s := scrape{types: map[string]string{}}
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if f := strings.Fields(line); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			s.types[f[2]] = f[3]
			continue
		}
		m := sampleLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		v, err := strconv.ParseFloat(m[3], 64)
		if err != nil {
			continue
		}
		ls := map[string]string{}
		for _, p := range labelPair.FindAllStringSubmatch(m[2], -1) {
			ls[p[1]] = p[2]
		}
		s.samples = append(s.samples, sample{m[1], ls, v})
	}
	return s
}

// of returns the samples named name whose labels include want.
func (s scrape) of(name string, want map[string]string) []sample {
	var out []sample
	for _, x := range s.samples {
		ok := x.name == name
		for k, v := range want {
			ok = ok && x.labels[k] == v
		}
		if ok {
			out = append(out, x)
		}
	}
	return out
}

// value sums the samples named name whose labels include want; false if there are none.
func (s scrape) value(name string, want map[string]string) (float64, bool) {
	xs := s.of(name, want)
	sum := 0.0
	for _, x := range xs {
		sum += x.value
	}
	return sum, len(xs) > 0
}

// checkFamily fails unless family is on the scrape with type typ, every series with
// exactly the label names labels (plus le for a histogram's buckets) and, for a histogram,
// the bucket bounds buckets (then +Inf).
func checkFamily(t *testing.T, s scrape, family, typ string, labels []string, buckets []float64) {
	t.Helper()
	if got := s.types[family]; got != typ {
		t.Errorf("%s: TYPE %q, want %q", family, got, typ)
		return
	}
	names := []string{family}
	if typ == "histogram" {
		names = []string{family + "_bucket", family + "_count", family + "_sum"}
	}
	for _, n := range names {
		xs := s.of(n, nil)
		if len(xs) == 0 {
			t.Errorf("%s: no samples", n)
		}
		for _, x := range xs {
			var got []string
			for k := range x.labels {
				if k != "le" {
					got = append(got, k)
				}
			}
			slices.Sort(got)
			if !slices.Equal(got, labels) {
				t.Errorf("%s%v: label names %v, want %v", n, x.labels, got, labels)
			}
		}
	}
	if typ != "histogram" {
		return
	}
	bySeries := map[string][]float64{}
	for _, x := range s.of(family+"_bucket", nil) {
		var key []string
		for _, l := range labels {
			key = append(key, x.labels[l])
		}
		le, err := strconv.ParseFloat(x.labels["le"], 64)
		if err != nil {
			t.Errorf("%s: le %q", family, x.labels["le"])
			continue
		}
		k := strings.Join(key, ",")
		bySeries[k] = append(bySeries[k], le)
	}
	for k, les := range bySeries {
		want := append(slices.Clone(buckets), inf)
		if !slices.Equal(les, want) {
			t.Errorf("%s{%s}: buckets %v, want %v", family, k, les, want)
		}
	}
}

var inf, _ = strconv.ParseFloat("+Inf", 64)

// kube-ipvs, programming a real kernel, exports on /metrics every metric name kube-proxy's
// dashboards, alerts and scale tests read (kubeProxyUsers) and the rest of kube-proxy's
// IPVS-mode metrics, with kube-proxy's types, labels and buckets; and their values move as
// kube-proxy's do: an EndpointSlice change counts, is observed as programmed once the
// kernel has it, and is synced; health probes count; a Local Service without a local
// endpoint is counted.
func TestKubeProxyMetricNamesOnAScrape(t *testing.T) {
	dir := setupNode(t)
	web := serviceYAML(svcOpts{name: "web", clusterIP: "10.96.140.1", port: 80, targetPort: 8080})
	local := serviceYAML(svcOpts{name: "local", clusterIP: "10.96.140.2", port: 80, targetPort: 8080, internalLocal: true})
	localSlice := sliceYAML("local", "local-1", "TCP", 8080, "", ep{ip: "10.244.14.21", node: "node-other"})
	writeManifests(t, dir, "svc.yaml", web, sliceYAML("web", "web-1", "TCP", 8080, "", eps("10.244.14.11")...), local, localSlice)
	startedAt := time.Now()
	p := startProxy(t, dir)
	eventually(t, firstSync, "web's virtual server", func() bool { return realServers(vsBlock(t, "TCP", "10.96.140.1:80")) == 1 })

	var s scrape
	t.Cleanup(func() {
		if t.Failed() {
			for _, x := range s.samples {
				if strings.HasPrefix(x.name, "kubeproxy_") {
					t.Logf("%s%v %v", x.name, x.labels, x.value)
				}
			}
		}
	})
	// The first sync is in the metrics once its last timestamp is.
	eventually(t, 10*time.Second, "the first sync in the metrics", func() bool {
		s = scrapeMetrics(t)
		v, _ := s.value("kubeproxy_sync_proxy_rules_last_timestamp_seconds", map[string]string{"ip_family": "IPv4"})
		return v >= float64(startedAt.Unix())
	})
	for _, u := range kubeProxyUsers {
		if u.apiClient {
			if _, ok := s.types[u.family]; ok {
				t.Errorf("%s exported by a proxy without an API client", u.family)
			}
			continue
		}
		checkFamily(t, s, u.family, u.typ, u.labels, u.buckets)
	}
	for _, o := range kubeProxyOthers[:7] { // the health counters exist once a probe is answered
		checkFamily(t, s, o.family, o.typ, o.labels, nil)
	}
	if _, ok := s.value("kubeproxy_sync_proxy_rules_duration_seconds_count", map[string]string{"ip_family": "IPv6"}); ok {
		t.Error("an IPv4-only node exports IPv6 syncs")
	}
	if v, _ := s.value("kubeproxy_sync_proxy_rules_no_local_endpoints_total", map[string]string{"ip_family": "IPv4", "traffic_policy": "internal"}); v != 1 {
		t.Errorf("Services with internalTrafficPolicy: Local and no endpoint here: %v, want 1 (local)", v)
	}
	before := s

	// Probes, and an endpoint change with a trigger time, which the kernel must get.
	for _, path := range []string{"/healthz", "/livez"} {
		if code, _, _ := httpGet(t, "http://127.0.0.1:10256"+path); code != 200 {
			t.Errorf("%s answered %d", path, code)
		}
	}
	trigger := time.Now()
	slice := sliceYAML("web", "web-1", "TCP", 8080, "", eps("10.244.14.11", "10.244.14.12")...)
	slice = strings.Replace(slice, "  labels:", "  annotations: {endpoints.kubernetes.io/last-change-trigger-time: \""+trigger.UTC().Format(time.RFC3339Nano)+"\"}\n  labels:", 1)
	writeManifests(t, dir, "svc.yaml", web, slice, local, localSlice)
	p.reload()
	eventually(t, 10*time.Second, "the new endpoint in the kernel", func() bool { return realServers(vsBlock(t, "TCP", "10.96.140.1:80")) == 2 })
	eventually(t, 10*time.Second, "the change in the metrics", func() bool {
		s = scrapeMetrics(t)
		n, _ := s.value("kubeproxy_network_programming_duration_seconds_count", map[string]string{"ip_family": "IPv4"})
		return n >= 1
	})
	for _, o := range kubeProxyOthers {
		checkFamily(t, s, o.family, o.typ, o.labels, nil)
	}
	grew := func(name string, labels map[string]string) {
		t.Helper()
		a, _ := before.value(name, labels)
		b, _ := s.value(name, labels)
		if b <= a {
			t.Errorf("%s%v stayed at %v (before the change %v), want it to grow", name, labels, b, a)
		}
	}
	v4 := map[string]string{"ip_family": "IPv4"}
	grew("kubeproxy_sync_proxy_rules_endpoint_changes_total", nil)
	grew("kubeproxy_sync_proxy_rules_duration_seconds_count", v4)
	grew("kubeproxy_sync_proxy_rules_last_timestamp_seconds", v4)
	grew("kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds", v4)
	grew("kubeproxy_proxy_healthz_total", map[string]string{"code": "200"})
	grew("kubeproxy_proxy_livez_total", map[string]string{"code": "200"})
	// The change was programmed within seconds of its trigger: its observation is in a
	// bucket well below the timeout, and the histogram's sum is the time it took.
	n, _ := s.value("kubeproxy_network_programming_duration_seconds_count", v4)
	sum, _ := s.value("kubeproxy_network_programming_duration_seconds_sum", v4)
	if took := time.Since(trigger).Seconds(); n != 1 || sum < 0 || sum > took {
		t.Errorf("programming latency: %v observations summing %v s, want 1 within %v s", n, sum, took)
	}
	if v, _ := s.value("kubeproxy_sync_proxy_rules_endpoint_changes_pending", nil); v != 0 {
		t.Errorf("endpoint changes pending %v after the sync, want 0", v)
	}
	if v, _ := s.value("kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds", v4); v < float64(trigger.Unix()) {
		t.Errorf("last queued %v, before the change at %v", v, trigger.Unix())
	}
}

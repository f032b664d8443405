//go:build guest

package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

func httpGet(t *testing.T, url string) (int, http.Header, string) {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// metricValue sums the samples of a metric whose label set contains every given label.
func metricValue(body, name string, labels ...string) (float64, bool) {
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `(\{[^}]*\})? ([0-9.e+-]+)$`)
	sum, found := 0.0, false
	for _, m := range re.FindAllStringSubmatch(body, -1) {
		ok := true
		for _, l := range labels {
			if !strings.Contains(m[1], l) {
				ok = false
			}
		}
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(m[2], 64)
		if err == nil {
			sum += v
			found = true
		}
	}
	return sum, found
}

// /healthz, /livez and /metrics answer on a running proxy; the metrics show writes, the
// network programming latency of an endpoint change and per-Service IPVS counters.
func TestHealthAndMetricsEndpoints(t *testing.T) {
	dir := setupNode(t)
	backends(t, "om", 13, 2)
	cli := client(t, "omc", "10.244.9.13")
	svc := serviceYAML(svcOpts{name: "web", clusterIP: "10.96.130.1", port: 80, targetPort: 8080})
	writeManifests(t, dir, "svc.yaml", svc, sliceYAML("web", "web-1", "TCP", 8080, "", eps("10.244.13.11")...))
	p := startProxy(t, dir)
	eventually(t, firstSync, "the virtual server", func() bool { return realServers(vsBlock(t, "TCP", "10.96.130.1:80")) == 1 })

	for _, path := range []string{"/healthz", "/livez"} {
		var code int
		var body string
		eventually(t, 10*time.Second, path+" to answer 200", func() bool {
			code, _, body = httpGet(t, "http://127.0.0.1:10256"+path)
			return code == 200
		})
		var h struct {
			LastUpdated string `json:"lastUpdated"`
			CurrentTime string `json:"currentTime"`
			Healthy     *bool  `json:"healthy"`
		}
		if err := json.Unmarshal([]byte(body), &h); err != nil || h.LastUpdated == "" || h.CurrentTime == "" || h.Healthy == nil || !*h.Healthy {
			t.Errorf("%s body %q (%v): want lastUpdated, currentTime and healthy=true", path, body, err)
		}
	}

	// An endpoint change with a trigger time after the proxy started.
	// Sub-second precision: the proxy ignores trigger times from before it started, and one
	// truncated to the second could fall before that.
	trigger := time.Now().UTC().Format(time.RFC3339Nano)
	slice := sliceYAML("web", "web-1", "TCP", 8080, "", eps("10.244.13.11", "10.244.13.12")...)
	slice = strings.Replace(slice, "  labels:", "  annotations: {endpoints.kubernetes.io/last-change-trigger-time: \""+trigger+"\"}\n  labels:", 1)
	writeManifests(t, dir, "svc.yaml", svc, slice)
	p.reload()
	eventually(t, 10*time.Second, "the new endpoint", func() bool { return realServers(vsBlock(t, "TCP", "10.96.130.1:80")) == 2 })
	ask(t, cli, "10.96.130.1:80", 6)

	var body string
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("last /metrics:\n%s", body)
		}
	})
	eventually(t, 10*time.Second, "metrics with programming latency and per-Service counters", func() bool {
		_, _, body = httpGet(t, "http://127.0.0.1:10249/metrics")
		n, ok := metricValue(body, "kube_ipvs_network_programming_duration_seconds_count")
		c, ok2 := metricValue(body, "kube_ipvs_service_connections_total", `namespace="e2e"`, `name="web"`, `port="p"`)
		return ok && n >= 1 && ok2 && c >= 6
	})
	for _, want := range []struct {
		name   string
		labels []string
	}{
		{"kube_ipvs_netlink_writes_total", []string{`subsystem="ipvs"`, `operation="add"`}},
		{"kube_ipvs_netlink_writes_total", []string{`subsystem="address"`, `operation="add"`}},
		{"kube_ipvs_sync_duration_seconds_count", []string{`kind="full"`}},
		{"kube_ipvs_sync_duration_seconds_count", []string{`kind="partial"`}},
		{"kube_ipvs_last_successful_sync_timestamp_seconds", nil},
		{"kube_ipvs_virtual_servers", nil},
		{"kube_ipvs_proxy_mode", []string{`mode="ipvs"`}},
	} {
		if v, ok := metricValue(body, want.name, want.labels...); !ok || v <= 0 {
			t.Errorf("metric %s%v = %v (present %v), want > 0", want.name, want.labels, v, ok)
		}
	}
	if v, _ := metricValue(body, "kube_ipvs_service_packets_in_total", `name="web"`); v < 6 {
		t.Errorf("packets in for web = %v", v)
	}
}

// The health check node port of an externalTrafficPolicy=Local Service answers 200 with the
// local endpoint count, and 503 once the last local endpoint is gone.
func TestServiceHealthNodePortFlips(t *testing.T) {
	dir := setupNode(t)
	backends(t, "hc", 14, 1)
	svc := serviceYAML(svcOpts{name: "lb", typ: "LoadBalancer", clusterIP: "10.96.140.1", port: 80, targetPort: 8080, nodePort: 30140, lbIP: "198.51.100.140"})
	svc = strings.Replace(svc, "  ports:", "  externalTrafficPolicy: Local\n  healthCheckNodePort: 32140\n  ports:", 1)
	local := sliceYAML("lb", "lb-1", "TCP", 8080, "", eps("10.244.14.11")...)
	writeManifests(t, dir, "svc.yaml", svc, local)
	p := startProxy(t, dir)
	url := fmt.Sprintf("http://%s:32140/", nodeIP)
	var code int
	var hdr http.Header
	var body string
	eventually(t, firstSync, "the health check node port to answer 200", func() bool {
		c := &http.Client{Timeout: time.Second}
		resp, err := c.Get(url)
		if err != nil {
			return false
		}
		resp.Body.Close()
		code, hdr, body = httpGet(t, url)
		return code == 200
	})
	if hdr.Get("X-Load-Balancing-Endpoint-Weight") != "1" || !strings.Contains(body, `"localEndpoints":1`) ||
		!strings.Contains(body, `"namespace":"e2e"`) || !strings.Contains(body, `"name":"lb"`) {
		t.Errorf("health answer: header %q body %s", hdr.Get("X-Load-Balancing-Endpoint-Weight"), body)
	}

	// The only endpoint moves to another node: no local endpoint is left.
	writeManifests(t, dir, "svc.yaml", svc, sliceYAML("lb", "lb-1", "TCP", 8080, "", ep{ip: "10.244.14.11", node: "other-node"}))
	p.reload()
	eventually(t, 10*time.Second, "the health check node port to answer 503", func() bool {
		code, _, body = httpGet(t, url)
		return code == 503
	})
	if !strings.Contains(body, `"localEndpoints":0`) {
		t.Errorf("503 body %s", body)
	}
}

package main

import (
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// metricsURL is where kube-ipvs serves /metrics by default (--metrics-bind-address).
const metricsURL = "http://127.0.0.1:10249/metrics"

func scrape() string {
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(metricsURL)
	if err != nil {
		fatalf("GET %s: %v", metricsURL, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		fatalf("GET %s: %s", metricsURL, resp.Status)
	}
	return string(b)
}

// sum adds up the samples of name whose labels contain every one of labels (`k="v"`).
func sum(body, name string, labels ...string) (float64, bool) {
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `(\{[^}]*\})? (\S+)$`)
	total, found := 0.0, false
	for _, m := range re.FindAllStringSubmatch(body, -1) {
		ok := true
		for _, l := range labels {
			ok = ok && strings.Contains(m[1], l)
		}
		v, err := strconv.ParseFloat(m[2], 64)
		if ok && err == nil {
			total += v
			found = true
		}
	}
	return total, found
}

// scenarioMetrics checks the kube-proxy metric names against a real API server: the
// informers' lists and watches are in rest_client_requests_total and timed in
// rest_client_request_duration_seconds (the kube-prometheus mixin's API panels), and an
// EndpointSlice change carrying endpoints.kubernetes.io/last-change-trigger-time, delivered
// by the watch, is in kubeproxy_network_programming_duration_seconds once the kernel has it
// (ClusterLoader2's network programming latency).
func (g *guest) scenarioMetrics() {
	body := scrape()
	for _, want := range []struct {
		name   string
		labels []string
	}{
		{"rest_client_requests_total", []string{`code="200"`, `method="GET"`}},
		{"rest_client_request_duration_seconds_count", []string{`verb="GET"`}},
		{"kubeproxy_sync_proxy_rules_endpoint_changes_total", nil},
		{"kubeproxy_sync_proxy_rules_service_changes_total", nil},
		{"kubeproxy_sync_proxy_rules_duration_seconds_count", []string{`ip_family="IPv4"`}},
	} {
		if v, ok := sum(body, want.name, want.labels...); !ok || v <= 0 {
			fatalf("metrics: %s%v = %v (present %v), want > 0\n%s", want.name, want.labels, v, ok, body)
		}
	}
	before, _ := sum(body, "kubeproxy_network_programming_duration_seconds_count", `ip_family="IPv4"`)

	trigger := time.Now()
	es := g.slice("be1", "be3")
	cur, err := g.cs.DiscoveryV1().EndpointSlices(ns).Get(g.ctx, es.Name, metav1.GetOptions{})
	if err != nil {
		fatalf("get EndpointSlice: %v", err)
	}
	es.ResourceVersion = cur.ResourceVersion
	es.Annotations = map[string]string{"endpoints.kubernetes.io/last-change-trigger-time": trigger.UTC().Format(time.RFC3339Nano)}
	if _, err := g.cs.DiscoveryV1().EndpointSlices(ns).Update(g.ctx, es, metav1.UpdateOptions{}); err != nil {
		fatalf("update EndpointSlice: %v", err)
	}
	g.waitRealServers(30*time.Second, "be1", "be3")
	var n, s float64
	eventually(10*time.Second, "the change in kubeproxy_network_programming_duration_seconds", func() bool {
		body = scrape()
		n, _ = sum(body, "kubeproxy_network_programming_duration_seconds_count", `ip_family="IPv4"`)
		s, _ = sum(body, "kubeproxy_network_programming_duration_seconds_sum", `ip_family="IPv4"`)
		return n > before
	})
	requests, _ := sum(body, "rest_client_requests_total", `code="200"`, `method="GET"`)
	pass("metrics: %v API requests counted; an EndpointSlice change through the watch observed as programmed (%v observations, %.3fs in all, within %s of its trigger time)",
		requests, n, s, time.Since(trigger).Round(time.Millisecond))
	g.setEndpoints("be3") // as the scenarios after this one expect
	g.waitRealServers(30*time.Second, "be3")
}

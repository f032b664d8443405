package main

import "testing"

func TestParseHistogram(t *testing.T) {
	text := `# HELP x
kubeproxy_sync_proxy_rules_duration_seconds_bucket{le="0.001"} 0
kubeproxy_sync_proxy_rules_duration_seconds_bucket{le="0.002"} 5
kubeproxy_sync_proxy_rules_duration_seconds_bucket{le="1.024"} 9
kubeproxy_sync_proxy_rules_duration_seconds_bucket{le="+Inf"} 10
kubeproxy_sync_proxy_rules_duration_seconds_sum 12.5
kubeproxy_sync_proxy_rules_duration_seconds_count 10
other_bucket{le="0.001"} 7
`
	labelled := `kubeproxy_sync_proxy_rules_duration_seconds_bucket{ip_family="IPv4",le="0.5"} 2
kubeproxy_sync_proxy_rules_duration_seconds_bucket{ip_family="IPv4",le="+Inf"} 3
kubeproxy_sync_proxy_rules_duration_seconds_sum{ip_family="IPv4"} 4
kubeproxy_sync_proxy_rules_duration_seconds_count{ip_family="IPv4"} 3
`
	if h, err := parseHistogram(labelled, syncMetric); err != nil || h.count != 3 || h.sum != 4 || h.quantile(0.5) != "0.5" {
		t.Fatalf("labelled series: %+v %v", h, err)
	}
	h, err := parseHistogram(text, syncMetric)
	if err != nil {
		t.Fatal(err)
	}
	if h.count != 10 || h.sum != 12.5 {
		t.Fatalf("count %d sum %v", h.count, h.sum)
	}
	for q, want := range map[float64]string{0.5: "0.002", 0.9: "1.024", 0.99: "+Inf", 1: "+Inf"} {
		if got := h.quantile(q); got != want {
			t.Errorf("quantile(%v) = %s, want %s", q, got, want)
		}
	}
	if _, err := parseHistogram("other 1\n", syncMetric); err == nil {
		t.Error("a text without the metric parsed")
	}
}

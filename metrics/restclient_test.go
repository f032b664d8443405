package metrics

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// A real client-go request (a List, then a watch, as an informer makes) is counted in
// rest_client_requests_total by code, method and host, and timed in
// rest_client_request_duration_seconds by verb and host, on every Metrics that enabled them:
// the names, labels and buckets the mixin's API request panels read.
func TestRESTClientMetricsFromRealRequests(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Query().Get("watch") == "true" {
			w.WriteHeader(http.StatusOK) // an empty stream: the watch ends at once
			return
		}
		if r.URL.Path != "/api/v1/namespaces/default/services" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write([]byte(`{"kind":"ServiceList","apiVersion":"v1","metadata":{"resourceVersion":"7"},"items":[]}`))
	}))
	defer srv.Close()
	host := srv.Listener.Addr().String()

	m, other := newTestMetrics(), newTestMetrics()
	for _, x := range []*Metrics{m, other} {
		if err := x.EnableRESTClientMetrics(); err != nil {
			t.Fatal(err)
		}
	}
	client, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := client.CoreV1().Services("default").List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	w, err := client.CoreV1().Services("default").Watch(ctx, metav1.ListOptions{ResourceVersion: "7"})
	if err != nil {
		t.Fatal(err)
	}
	for range w.ResultChan() { // the stream is empty: the channel closes
	}
	_, _ = client.CoreV1().ConfigMaps("default").Get(ctx, "absent", metav1.GetOptions{})

	for _, x := range []*Metrics{m, other} {
		fams, err := x.Registry().Gather()
		if err != nil {
			t.Fatal(err)
		}
		defs := kubeProxyDefs()
		for _, f := range fams {
			if def, ok := defs[f.GetName()]; ok && (f.GetName() == "rest_client_requests_total" || f.GetName() == "rest_client_request_duration_seconds") {
				checkDef(t, f, def)
			}
		}
		if n, _ := histogramOrZero(t, x.Registry(), "rest_client_request_duration_seconds", map[string]string{"verb": "GET", "host": host}); n != 2 {
			// client-go times requests with a whole response; a watch is a stream, counted only.
			t.Errorf("%d GET requests timed for %s, want 2 (the list and the get)", n, host)
		}
		for code, want := range map[string]float64{"200": 2, "404": 1} {
			if got := counterValue(t, x, "rest_client_requests_total", map[string]string{"code": code, "method": "GET", "host": host}); got != want {
				t.Errorf("requests with code %s: %v, want %v", code, got, want)
			}
		}
	}
}

func counterValue(t *testing.T, m *Metrics, name string, labels map[string]string) float64 {
	t.Helper()
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		for _, s := range f.GetMetric() {
			if f.GetName() == name && matchLabels(s, labels) {
				return s.GetCounter().GetValue()
			}
		}
	}
	return 0
}

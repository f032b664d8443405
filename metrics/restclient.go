package metrics

import (
	"context"
	"net/url"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientmetrics "k8s.io/client-go/tools/metrics"
)

// The API client's request metrics under the names every Kubernetes component exports
// (k8s.io/component-base/metrics/prometheus/restclient, which kube-proxy links in): the
// kube-prometheus mixin's kube-proxy dashboard draws its "Kube API Request Rate" and request
// latency panels from them. client-go reports to whatever adapters are registered with
// k8s.io/client-go/tools/metrics, once per process; these are kube-ipvs's, on
// client_golang instead of component-base (which the product does not link).

// RESTRequestBuckets are rest_client_request_duration_seconds's, component-base's.
var RESTRequestBuckets = []float64{0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0}

var (
	restRequestDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "rest_client_request_duration_seconds",
		Help:    "Request latency in seconds. Broken down by verb, and host.",
		Buckets: RESTRequestBuckets,
	}, []string{"verb", "host"})
	restRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rest_client_requests_total",
		Help: "Number of HTTP requests, partitioned by status code, method, and host.",
	}, []string{"code", "method", "host"})
	restOnce sync.Once
)

type restLatency struct{}

func (restLatency) Observe(_ context.Context, verb string, u url.URL, latency time.Duration) {
	restRequestDuration.WithLabelValues(verb, u.Host).Observe(latency.Seconds())
}

type restResult struct{}

func (restResult) Increment(_ context.Context, code, method, host string) {
	restRequests.WithLabelValues(code, method, host).Inc()
}

// EnableRESTClientMetrics has client-go's API requests counted and timed in this process
// (rest_client_requests_total, rest_client_request_duration_seconds) and exports them on
// m's registry. client-go takes its adapters once per process: the first call installs
// them, and every Metrics that calls it exports the same process-wide series. Call it
// before the first request to count them all. The --manifests source is no API client and
// makes no requests, so the series stay absent.
func (m *Metrics) EnableRESTClientMetrics() error {
	restOnce.Do(func() {
		clientmetrics.Register(clientmetrics.RegisterOpts{
			RequestLatency: restLatency{},
			RequestResult:  restResult{},
		})
	})
	for _, c := range []prometheus.Collector{restRequestDuration, restRequests} {
		if err := m.reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

package metrics

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kube-ipvs/kube-ipvs/model"
)

// backendCheckMetrics are the per-Service metrics of the opt-in backend health checks
// (package backendcheck), registered on first use: a proxy without checked Services
// exports none of them. Only checked Services get series, so their number stays small.
type backendCheckMetrics struct {
	checked   *prometheus.GaugeVec
	unhealthy *prometheus.GaugeVec
	latency   *prometheus.HistogramVec
}

var serviceLabels = []string{"namespace", "service"}

func newBackendCheckMetrics() *backendCheckMetrics {
	return &backendCheckMetrics{
		checked: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "backend_checked_endpoints",
			Help: "Endpoints of the Service that this node health-checks (annotation kube-ipvs.io/health-check).",
		}, serviceLabels),
		unhealthy: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "backend_unhealthy_endpoints",
			Help: "Endpoints of the Service that fail their health check from this node (weight 0 unless all fail).",
		}, serviceLabels),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "backend_check_duration_seconds",
			Help:    "How long one health check of one of the Service's endpoints took, failed ones included.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14), // 0.5ms .. ~4s
		}, serviceLabels),
	}
}

// backendChecks returns the check metrics, registering them the first time.
func (m *Metrics) backendChecks() *backendCheckMetrics {
	m.checksOnce.Do(func() {
		b := newBackendCheckMetrics()
		m.reg.MustRegister(b.checked, b.unhealthy, b.latency)
		m.checks = b
	})
	return m.checks
}

// ObserveBackendCheck records the duration of one health check of an endpoint of svc.
func (m *Metrics) ObserveBackendCheck(svc model.ServiceName, took time.Duration) {
	m.backendChecks().latency.WithLabelValues(svc.Namespace, svc.Name).Observe(took.Seconds())
}

// SetBackendCheckCounts sets how many endpoints of svc are checked and how many fail.
func (m *Metrics) SetBackendCheckCounts(svc model.ServiceName, checked, unhealthy int) {
	b := m.backendChecks()
	b.checked.WithLabelValues(svc.Namespace, svc.Name).Set(float64(checked))
	b.unhealthy.WithLabelValues(svc.Namespace, svc.Name).Set(float64(unhealthy))
}

// ForgetBackendChecks drops the series of a Service that is no longer checked.
func (m *Metrics) ForgetBackendChecks(svc model.ServiceName) {
	b := m.backendChecks()
	for _, v := range []interface{ DeleteLabelValues(...string) bool }{b.checked, b.unhealthy, b.latency} {
		v.DeleteLabelValues(svc.Namespace, svc.Name)
	}
}

// checksState is embedded in Metrics for the lazily registered check metrics.
type checksState struct {
	checksOnce sync.Once
	checks     *backendCheckMetrics
}

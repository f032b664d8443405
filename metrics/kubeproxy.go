package metrics

import "github.com/prometheus/client_golang/prometheus"

// Results of a kube-proxy cleanup attempt (kube_proxy_cleanup_attempts_total's label).
const (
	CleanupSucceeded = "succeeded"
	CleanupFailed    = "failed"
)

// kubeProxyCleanup describes `kube-ipvs run --cleanup-kube-proxy`: an operator alerts on
// kube_ipvs_kube_proxy_cleanup_pending staying 1 (the log and a Warning Event on the Node
// say what failed).
type kubeProxyCleanup struct {
	attempts *prometheus.CounterVec
	removed  *prometheus.CounterVec
	pending  prometheus.Gauge
}

// kubeProxyCleanup registers the metrics on first use, so that a proxy without the flag
// exports none of them.
func (m *Metrics) kubeProxyCleanup() *kubeProxyCleanup {
	m.kpOnce.Do(func() {
		k := &kubeProxyCleanup{
			attempts: newCounterVec("kube_proxy_cleanup_attempts_total",
				"Attempts to remove kube-proxy's leftovers after the first full sync (--cleanup-kube-proxy), by result.", "result"),
			removed: newCounterVec("kube_proxy_cleanup_removed_objects_total",
				"kube-proxy's objects removed after the first full sync, by kind (chain, rule, ipset).", "kind"),
			pending: newStateGauge("kube_proxy_cleanup_pending",
				"1 while kube-proxy's leftovers are still to be removed (--cleanup-kube-proxy), 0 once they are."),
		}
		for _, r := range []string{CleanupSucceeded, CleanupFailed} {
			k.attempts.WithLabelValues(r)
		}
		m.reg.MustRegister(k.attempts, k.removed, k.pending)
		m.kp = k
	})
	return m.kp
}

// KubeProxyCleanupPending marks the cleanup as waiting for the first sync or a retry.
func (m *Metrics) KubeProxyCleanupPending() { m.kubeProxyCleanup().pending.Set(1) }

// KubeProxyCleanupAttempt records one attempt: the objects it removed by kind, and whether
// it finished the cleanup.
func (m *Metrics) KubeProxyCleanupAttempt(removed map[string]int, succeeded bool) {
	k := m.kubeProxyCleanup()
	for kind, n := range removed {
		k.removed.WithLabelValues(kind).Add(float64(n))
	}
	if succeeded {
		k.attempts.WithLabelValues(CleanupSucceeded).Inc()
		k.pending.Set(0)
		return
	}
	k.attempts.WithLabelValues(CleanupFailed).Inc()
	k.pending.Set(1)
}

package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// Without --cleanup-kube-proxy nothing is exported; with it, pending stays 1 through the
// failures and drops to 0 with the success, and removals add up by kind.
func TestKubeProxyCleanupMetrics(t *testing.T) {
	m := newTestMetrics()
	if n, err := testutil.GatherAndCount(m.reg, "kube_ipvs_kube_proxy_cleanup_pending"); err != nil || n != 0 {
		t.Fatalf("exported before use: %d, %v", n, err)
	}
	m.KubeProxyCleanupPending()
	m.KubeProxyCleanupAttempt(map[string]int{"chain": 3, "rule": 2}, false)
	if got := testutil.ToFloat64(m.kp.pending); got != 1 {
		t.Errorf("pending %v after a failure, want 1", got)
	}
	m.KubeProxyCleanupAttempt(map[string]int{"ipset": 1, "chain": 1}, true)
	want := `
# HELP kube_ipvs_kube_proxy_cleanup_attempts_total Attempts to remove kube-proxy's leftovers after the first full sync (--cleanup-kube-proxy), by result.
# TYPE kube_ipvs_kube_proxy_cleanup_attempts_total counter
kube_ipvs_kube_proxy_cleanup_attempts_total{result="failed"} 1
kube_ipvs_kube_proxy_cleanup_attempts_total{result="succeeded"} 1
# HELP kube_ipvs_kube_proxy_cleanup_pending 1 while kube-proxy's leftovers are still to be removed (--cleanup-kube-proxy), 0 once they are.
# TYPE kube_ipvs_kube_proxy_cleanup_pending gauge
kube_ipvs_kube_proxy_cleanup_pending 0
# HELP kube_ipvs_kube_proxy_cleanup_removed_objects_total kube-proxy's objects removed after the first full sync, by kind (chain, rule, ipset).
# TYPE kube_ipvs_kube_proxy_cleanup_removed_objects_total counter
kube_ipvs_kube_proxy_cleanup_removed_objects_total{kind="chain"} 4
kube_ipvs_kube_proxy_cleanup_removed_objects_total{kind="ipset"} 1
kube_ipvs_kube_proxy_cleanup_removed_objects_total{kind="rule"} 2
`
	if err := testutil.GatherAndCompare(m.reg, strings.NewReader(want), "kube_ipvs_kube_proxy_cleanup_attempts_total",
		"kube_ipvs_kube_proxy_cleanup_pending", "kube_ipvs_kube_proxy_cleanup_removed_objects_total"); err != nil {
		t.Error(err)
	}
}

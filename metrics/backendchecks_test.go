package metrics

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kube-ipvs/kube-ipvs/model"
)

func TestBackendCheckMetrics(t *testing.T) {
	m := New(WithoutRuntimeMetrics())
	if n, _ := testutil.GatherAndCount(m.Registry(), "kube_ipvs_backend_checked_endpoints"); n != 0 {
		t.Fatalf("%d check series before any check", n)
	}
	web, db := model.ServiceName{Namespace: "ns", Name: "web"}, model.ServiceName{Namespace: "ns", Name: "db"}
	m.SetBackendCheckCounts(web, 3, 1)
	m.SetBackendCheckCounts(db, 2, 0)
	m.ObserveBackendCheck(web, 3*time.Millisecond)
	m.ObserveBackendCheck(web, 2*time.Second)
	b := m.backendChecks()
	if v := testutil.ToFloat64(b.unhealthy.WithLabelValues("ns", "web")); v != 1 {
		t.Errorf("unhealthy web = %v, want 1", v)
	}
	if v := testutil.ToFloat64(b.checked.WithLabelValues("ns", "db")); v != 2 {
		t.Errorf("checked db = %v, want 2", v)
	}
	if n, _ := testutil.GatherAndCount(m.Registry(), "kube_ipvs_backend_check_duration_seconds"); n != 1 {
		t.Errorf("%d latency series, want 1 (web)", n)
	}
	m.ForgetBackendChecks(web)
	if n, _ := testutil.GatherAndCount(m.Registry(), "kube_ipvs_backend_checked_endpoints", "kube_ipvs_backend_check_duration_seconds"); n != 1 {
		t.Errorf("%d series after forgetting web, want 1 (db's checked count)", n)
	}
}

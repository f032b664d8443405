package introspect

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/kube-ipvs/kube-ipvs/backendcheck"
	"github.com/kube-ipvs/kube-ipvs/model"
)

// explain shows a checked Service's probe and each endpoint's state: healthy, unhealthy
// with the last error, or pending before this node's first verdict.
func TestExplainShowsHealthCheckStates(t *testing.T) {
	rs := func(s string) model.RSKey {
		ap := netip.MustParseAddrPort(s)
		return model.RSKey{Addr: ap.Addr(), Port: ap.Port()}
	}
	name := model.ServiceName{Namespace: "demo", Name: "web"}
	st := &model.ServiceState{Name: name, VSes: map[model.VSKey]*model.VirtualServer{},
		HealthCheck: &model.HealthCheck{Kind: model.CheckHTTP, Path: "/healthz", Interval: 5 * time.Second, Timeout: time.Second,
			HealthyThreshold: 2, UnhealthyThreshold: 3, Targets: []model.RSKey{rs("10.1.0.1:8080"), rs("10.1.0.2:8080"), rs("10.1.0.3:8080")}}}
	checks := func(n model.ServiceName) []backendcheck.EndpointState {
		if n != name {
			t.Errorf("checker asked for %v", n)
		}
		return []backendcheck.EndpointState{
			{Endpoint: rs("10.1.0.1:8080"), Healthy: true, Checks: 4},
			{Endpoint: rs("10.1.0.2:8080"), Healthy: false, Checks: 3, LastError: errors.New("HTTP 500").Error()},
		}
	}
	doc := Build(Input{Services: []*model.ServiceState{st}, Checks: checks, Now: fixtureNow})
	var b strings.Builder
	if err := WriteExplain(&b, &doc.Services[0]); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"health check from this node: http:/healthz every 5s, timeout 1s, 2 passes to come back, 3 failures to go out",
		"10.1.0.1:8080", "healthy   checks 4",
		"unhealthy checks 3 last error: HTTP 500",
		"10.1.0.3:8080                            pending   checks 0",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("explain lacks %q:\n%s", want, out)
		}
	}
	st.HealthCheck = nil
	doc = Build(Input{Services: []*model.ServiceState{st}, Checks: checks, Now: fixtureNow})
	if doc.Services[0].HealthCheck != nil {
		t.Error("a Service without a check has a health-check section")
	}
}

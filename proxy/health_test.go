package proxy

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

func hcPort(p int32) svcOpt { return func(s *v1.Service) { s.Spec.HealthCheckNodePort = p } }

// The health-check node port and the count of local ready endpoints it reports.
func TestHealthCheckNodePortAndLocalEndpoints(t *testing.T) {
	eps := v4("s1", epPorts(sp("http", v1.ProtocolTCP, 8080)),
		ep("10.1.0.1", local), ep("10.1.0.2", local, ready(false)), ep("10.1.0.3", on("node-b")), ep("10.1.0.4", local))
	dup := v4("s2", epPorts(sp("http", v1.ProtocolTCP, 8080)), ep("10.1.0.4", local))
	cases := []struct {
		name      string
		svc       *v1.Service
		wantPort  uint16
		wantLocal int
	}{
		{"eTP Local with a health check port", service(svcType(v1.ServiceTypeLoadBalancer), etpLocal, hcPort(32000)), 32000, 2},
		{"eTP Cluster has no health check", service(svcType(v1.ServiceTypeLoadBalancer), hcPort(32000)), 0, 0},
		{"eTP Local without a port", service(svcType(v1.ServiceTypeLoadBalancer), etpLocal), 0, 0},
	}
	for _, c := range cases {
		st := BuildService(c.svc, []*discoveryv1.EndpointSlice{eps, dup}, config())
		if st.HealthCheckNodePort != c.wantPort || st.LocalEndpoints != c.wantLocal {
			t.Errorf("%s: port %d local %d, want %d and %d", c.name, st.HealthCheckNodePort, st.LocalEndpoints, c.wantPort, c.wantLocal)
		}
	}
}

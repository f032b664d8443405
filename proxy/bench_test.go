package proxy

import (
	"fmt"
	"testing"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// BenchmarkBuildService: a LoadBalancer Service with 2 ports and 100 endpoints in two
// slices, on a node with two node IPs: 2 x (ClusterIP + LB IP + 2 node IPs) = 8 VSes.
func BenchmarkBuildService(b *testing.B) {
	svc := service(lb("203.0.113.1"), ports(tcp("http", 80, 30080), tcp("https", 443, 30443)), sched("sh"), flags("sh-port"))
	ps := epPorts(sp("http", v1.ProtocolTCP, 8080), sp("https", v1.ProtocolTCP, 8443))
	var s1, s2 []discoveryv1.Endpoint
	for i := range 100 {
		e := ep(fmt.Sprintf("10.1.%d.%d", i/250, i%250+1), zones("z1"))
		if i%2 == 0 {
			s1 = append(s1, e)
		} else {
			s2 = append(s2, e)
		}
	}
	slices := []*discoveryv1.EndpointSlice{v4("s1", ps, s1...), v4("s2", ps, s2...)}
	cfg := config(zone("z1"), nodeIPs("192.168.1.10", "192.168.1.11"))
	if st := BuildService(svc, slices, cfg); len(st.VSes) != 8 || len(st.VSes[firstKey(st)].Reals) != 100 {
		b.Fatalf("unexpected state: %d VSes", len(st.VSes))
	}
	b.ReportAllocs()
	for b.Loop() {
		BuildService(svc, slices, cfg)
	}
}

package proxy

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/kube-ipvs/kube-ipvs/model"
)

// NoLocal marks a family's Local policy exactly when kube-proxy counts the Service in
// sync_proxy_rules_no_local_endpoints_total: the cluster has a usable endpoint (ready, or
// serving while terminating) and this node none. The ClusterIPs answer for
// internalTrafficPolicy, the node ports for externalTrafficPolicy.
func TestNoLocalEndpoints(t *testing.T) {
	nodePort := ports(tcp("http", 80, 30080))
	dual := clusterIPs("10.0.0.1", "fd00::1")
	for _, tc := range []struct {
		name   string
		svc    *v1.Service
		slices []*discoveryv1.EndpointSlice
		want   [2]model.LocalGap
	}{
		{"cluster policies", service(), []*discoveryv1.EndpointSlice{v4("a", httpPort, ep("10.1.0.1"))}, [2]model.LocalGap{}},
		{"internal Local, endpoint elsewhere", service(itpLocal), []*discoveryv1.EndpointSlice{v4("a", httpPort, ep("10.1.0.1"))},
			[2]model.LocalGap{{Internal: true}}},
		{"internal Local, one endpoint here", service(itpLocal), []*discoveryv1.EndpointSlice{v4("a", httpPort, ep("10.1.0.1"), ep("10.1.0.2", local))},
			[2]model.LocalGap{}},
		{"internal Local, no endpoint at all", service(itpLocal), nil, [2]model.LocalGap{}},
		{"internal Local, endpoint elsewhere not ready", service(itpLocal), []*discoveryv1.EndpointSlice{v4("a", httpPort, ep("10.1.0.1", ready(false)))},
			[2]model.LocalGap{}},
		{"internal Local, endpoint elsewhere draining", service(itpLocal), []*discoveryv1.EndpointSlice{v4("a", httpPort, ep("10.1.0.1", draining))},
			[2]model.LocalGap{{Internal: true}}},
		{"external Local", service(svcType(v1.ServiceTypeLoadBalancer), nodePort, lb("192.0.2.10"), etpLocal), []*discoveryv1.EndpointSlice{v4("a", httpPort, ep("10.1.0.1"))},
			[2]model.LocalGap{{External: true}}},
		{"both Local, dual stack, IPv6 endpoint here", service(dual, itpLocal), []*discoveryv1.EndpointSlice{
			v4("a", httpPort, ep("10.1.0.1")), v6("b", httpPort, ep("fd01::1", local))},
			[2]model.LocalGap{{Internal: true}, {}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := BuildService(tc.svc, tc.slices, config())
			if st.NoLocal != tc.want {
				t.Errorf("NoLocal %+v, want %+v", st.NoLocal, tc.want)
			}
		})
	}
}

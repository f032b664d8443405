package proxy

import (
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/kube-ipvs/kube-ipvs/model"
)

// In-cluster traffic to the external addresses of an externalTrafficPolicy: Local port: each
// external virtual server names the port's mark, and each family has one firewall-mark
// virtual server of that mark; ClusterIPs, Cluster-policy Services and ports without a node
// port or health-check node port get none.
func TestBuildServiceInClusterMarks(t *testing.T) {
	twoPorts := ports(tcp("http", 80, 30080), svcPort("dns", v1.ProtocolUDP, 53, 30053))
	noNodePorts := ports(tcp("http", 80, 0), svcPort("dns", v1.ProtocolUDP, 53, 0))
	hc := func(s *v1.Service) { s.Spec.HealthCheckNodePort = 32000 }
	dual := clusterIPs("10.0.0.1", "fd00::1")
	for _, tc := range []struct {
		name string
		svc  *v1.Service
		want map[string]uint32 // external VS -> mark; FWM VSes listed with their own mark
	}{{
		name: "by nodePort, per port and protocol",
		svc:  service(lb("203.0.113.1"), twoPorts, etpLocal),
		want: map[string]uint32{
			"TCP 203.0.113.1:80": model.InClusterMark(30080, model.TCP, -1), "TCP 192.168.1.10:30080": model.InClusterMark(30080, model.TCP, -1),
			"UDP 203.0.113.1:53": model.InClusterMark(30053, model.UDP, -1), "UDP 192.168.1.10:30053": model.InClusterMark(30053, model.UDP, -1),
			"FWM 0x75802001 IPv4": 0, "FWM 0x75652002 IPv4": 0,
		},
	}, {
		name: "no node ports: by the health-check node port and the port's index",
		svc:  service(lb("203.0.113.1"), noNodePorts, etpLocal, hc),
		want: map[string]uint32{
			"TCP 203.0.113.1:80": model.InClusterMark(32000, model.TCP, 0), "UDP 203.0.113.1:53": model.InClusterMark(32000, model.UDP, 1),
			"FWM 0x7d002005 IPv4": 0, "FWM 0x7d00200a IPv4": 0,
		},
	}, {
		name: "no node ports and no health-check node port: no mark",
		svc:  service(lb("203.0.113.1"), noNodePorts, etpLocal),
		want: map[string]uint32{"TCP 203.0.113.1:80": 0, "UDP 203.0.113.1:53": 0},
	}, {
		name: "Cluster policy: no mark",
		svc:  service(lb("203.0.113.1"), ports(tcp("http", 80, 30080))),
		want: map[string]uint32{"TCP 203.0.113.1:80": 0, "TCP 192.168.1.10:30080": 0},
	}, {
		name: "dual-stack: one firewall-mark virtual server per family",
		svc:  service(dual, externalIPs("192.0.2.1", "2001:db8::1"), svcType(v1.ServiceTypeNodePort), ports(tcp("http", 80, 30080)), etpLocal),
		want: map[string]uint32{
			"TCP 192.0.2.1:80": 0x75802001, "TCP [2001:db8::1]:80": 0x75802001,
			"TCP 192.168.1.10:30080": 0x75802001, "TCP [fd00::10]:30080": 0x75802001,
			"FWM 0x75802001 IPv4": 0, "FWM 0x75802001 IPv6": 0,
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			st := BuildService(tc.svc, nil, config(nodeIPs("192.168.1.10", "fd00::10")))
			got := map[string]uint32{}
			for k, vs := range st.VSes {
				if vs.Kind == model.KindClusterIP {
					if vs.InClusterMark != 0 {
						t.Errorf("%s: ClusterIP with mark %#x", k, vs.InClusterMark)
					}
					continue
				}
				got[k.String()] = vs.InClusterMark
				if (k.FWMark != 0) != (vs.Kind == model.KindInCluster) {
					t.Errorf("%s: kind %s", k, vs.Kind)
				}
			}
			if len(got) != len(tc.want) {
				t.Errorf("virtual servers %v, want %v", got, tc.want)
			}
			for k, m := range tc.want {
				if g, ok := got[k]; !ok || g != m {
					t.Errorf("%s: mark %#x (present %v), want %#x", k, g, ok, m)
				}
			}
		})
	}
}

package firewall

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-ipvs/kube-ipvs/model"
	"github.com/kube-ipvs/kube-ipvs/proxy"
)

// Builders: a ClusterIP Service ns/web on 10.0.0.1, TCP port 80 (nodePort 30080 when the
// type allows), and a desired state with one real server per virtual server.

type svcOpt func(*v1.Service)

func service(opts ...svcOpt) *v1.Service {
	s := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web"},
		Spec: v1.ServiceSpec{
			Type: v1.ServiceTypeClusterIP, ClusterIP: "10.0.0.1", ClusterIPs: []string{"10.0.0.1"},
			Ports: []v1.ServicePort{{Name: "http", Protocol: v1.ProtocolTCP, Port: 80, NodePort: 30080}},
		},
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

func lbType(ips ...string) svcOpt {
	return func(s *v1.Service) {
		s.Spec.Type = v1.ServiceTypeLoadBalancer
		for _, ip := range ips {
			s.Status.LoadBalancer.Ingress = append(s.Status.LoadBalancer.Ingress, v1.LoadBalancerIngress{IP: ip})
		}
	}
}
func local(s *v1.Service) { s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal }
func external(ips ...string) svcOpt {
	return func(s *v1.Service) { s.Spec.ExternalIPs = ips }
}
func sourceRangesOpt(rs ...string) svcOpt {
	return func(s *v1.Service) { s.Spec.LoadBalancerSourceRanges = rs }
}
func healthCheck(p int32) svcOpt { return func(s *v1.Service) { s.Spec.HealthCheckNodePort = p } }
func dual(s *v1.Service) {
	s.Spec.ClusterIPs = []string{"10.0.0.1", "fd00::1"}
}
func addPort(p v1.ServicePort) svcOpt {
	return func(s *v1.Service) { s.Spec.Ports = append(s.Spec.Ports, p) }
}

// vs is "TCP 10.0.0.1:80 -> 10.1.0.1:8080 10.1.0.2:8080".
func state(bind []string, vses ...string) *model.ServiceState {
	st := &model.ServiceState{
		Name: model.ServiceName{Namespace: "ns", Name: "web"},
		VSes: map[model.VSKey]*model.VirtualServer{},
	}
	for _, b := range bind {
		st.Bind = append(st.Bind, netip.MustParseAddr(b))
	}
	for _, s := range vses {
		f := strings.Fields(s)
		proto := map[string]model.Protocol{"TCP": model.TCP, "UDP": model.UDP, "SCTP": model.SCTP}[f[0]]
		ap := netip.MustParseAddrPort(f[1])
		key := model.VSKey{Addr: ap.Addr(), Proto: proto, Port: ap.Port()}
		vs := &model.VirtualServer{Key: key, Reals: map[model.RSKey]uint32{}}
		for _, r := range f[3:] {
			rp := netip.MustParseAddrPort(r)
			vs.Reals[model.RSKey{Addr: rp.Addr(), Port: rp.Port()}] = 1
		}
		st.VSes[key] = vs
	}
	return st
}

// resolved gives a hand-made state what proxy.BuildService would say about svc: each
// virtual server's kind and the Service's policy. Virtual servers BuildService would not
// make (a node port in a family the Service lacks) are dropped, as the state never has them.
func resolved(svc *v1.Service, st *model.ServiceState) *model.ServiceState {
	if st == nil {
		return nil
	}
	var addrs []netip.Addr
	for k := range st.VSes {
		addrs = append(addrs, k.Addr)
	}
	built := proxy.BuildService(svc, nil, &proxy.Config{NodeIPs: addrs})
	st.LoadBalancer, st.ExternalLocal = built.LoadBalancer, built.ExternalLocal
	st.SourceRanges, st.HealthCheckNodePort = built.SourceRanges, built.HealthCheckNodePort
	for k, vs := range st.VSes {
		b := built.VSes[k]
		if b == nil {
			delete(st.VSes, k)
			continue
		}
		vs.Kind = b.Kind
	}
	return st
}

// lines renders entries as sorted "SET entry" lines.
func lines(m map[SetName]map[Entry]bool) []string {
	var out []string
	for n, es := range m {
		for e, ok := range es {
			if ok {
				out = append(out, string(n)+" "+e.String())
			}
		}
	}
	slices.Sort(out)
	return out
}

func TestAppendMembers(t *testing.T) {
	nodeCfg := Config{NodeIPs: []netip.Addr{netip.MustParseAddr("192.168.1.10")}}
	cases := []struct {
		name string
		svc  *v1.Service
		st   *model.ServiceState
		cfg  Config
		want []string
	}{{
		name: "ClusterIP",
		svc:  service(),
		st:   state([]string{"10.0.0.1"}, "TCP 10.0.0.1:80 -> 10.1.0.1:8080 10.1.0.2:8080"),
		want: []string{
			"KIPVS-CLUSTER-IP 10.0.0.1,tcp:80",
			"KIPVS-LOOP-BACK 10.1.0.1,tcp:8080,10.1.0.1",
			"KIPVS-LOOP-BACK 10.1.0.2,tcp:8080,10.1.0.2",
			"KIPVS-VIPS 10.0.0.1",
		},
	}, {
		name: "ClusterIP without endpoints: no loop-back entries",
		svc:  service(),
		st:   state([]string{"10.0.0.1"}, "TCP 10.0.0.1:80 ->"),
		want: []string{"KIPVS-CLUSTER-IP 10.0.0.1,tcp:80", "KIPVS-VIPS 10.0.0.1"},
	}, {
		name: "dual-stack ClusterIP, UDP and SCTP ports",
		svc: service(dual, addPort(v1.ServicePort{Name: "dns", Protocol: v1.ProtocolUDP, Port: 53}),
			addPort(v1.ServicePort{Name: "s", Protocol: v1.ProtocolSCTP, Port: 9})),
		st: state([]string{"10.0.0.1", "fd00::1"},
			"TCP 10.0.0.1:80 -> 10.1.0.1:8080", "UDP 10.0.0.1:53 -> 10.1.0.1:5353", "SCTP 10.0.0.1:9 -> 10.1.0.1:9",
			"TCP [fd00::1]:80 -> [fd01::1]:8080", "UDP [fd00::1]:53 -> [fd01::1]:5353"),
		want: []string{
			"KIPVS-CLUSTER-IP 10.0.0.1,sctp:9",
			"KIPVS-CLUSTER-IP 10.0.0.1,tcp:80",
			"KIPVS-CLUSTER-IP 10.0.0.1,udp:53",
			"KIPVS-CLUSTER-IP-6 fd00::1,tcp:80",
			"KIPVS-CLUSTER-IP-6 fd00::1,udp:53",
			"KIPVS-LOOP-BACK 10.1.0.1,sctp:9,10.1.0.1",
			"KIPVS-LOOP-BACK 10.1.0.1,tcp:8080,10.1.0.1",
			"KIPVS-LOOP-BACK 10.1.0.1,udp:5353,10.1.0.1",
			"KIPVS-LOOP-BACK-6 fd01::1,tcp:8080,fd01::1",
			"KIPVS-LOOP-BACK-6 fd01::1,udp:5353,fd01::1",
			"KIPVS-VIPS 10.0.0.1",
			"KIPVS-VIPS-6 fd00::1",
		},
	}, {
		name: "IPv4-only config leaves IPv6 out",
		svc:  service(dual),
		st:   state([]string{"10.0.0.1", "fd00::1"}, "TCP 10.0.0.1:80 ->", "TCP [fd00::1]:80 ->"),
		cfg:  Config{IPv4: true},
		want: []string{"KIPVS-CLUSTER-IP 10.0.0.1,tcp:80", "KIPVS-VIPS 10.0.0.1"},
	}, {
		name: "NodePort, externalTrafficPolicy Cluster; none in the family the Service lacks",
		svc:  service(func(s *v1.Service) { s.Spec.Type = v1.ServiceTypeNodePort }),
		st: state([]string{"10.0.0.1"}, "TCP 10.0.0.1:80 -> 10.1.0.1:8080",
			"TCP 192.168.1.10:30080 -> 10.1.0.1:8080", "TCP [2001:db8::10]:30080 ->"),
		want: []string{
			"KIPVS-CLUSTER-IP 10.0.0.1,tcp:80",
			"KIPVS-LOOP-BACK 10.1.0.1,tcp:8080,10.1.0.1",
			"KIPVS-NODE-PORT 192.168.1.10,tcp:30080",
			"KIPVS-VIPS 10.0.0.1",
		},
	}, {
		name: "NodePort, externalTrafficPolicy Local",
		svc:  service(func(s *v1.Service) { s.Spec.Type = v1.ServiceTypeNodePort }, local),
		st:   state([]string{"10.0.0.1"}, "TCP 10.0.0.1:80 ->", "TCP 192.168.1.10:30080 ->"),
		want: []string{
			"KIPVS-CLUSTER-IP 10.0.0.1,tcp:80",
			"KIPVS-NODE-PORT-LOCAL 192.168.1.10,tcp:30080",
			"KIPVS-VIPS 10.0.0.1",
		},
	}, {
		name: "external IPs by traffic policy",
		svc:  service(external("192.0.2.5", "2001:db8::5")),
		st:   state([]string{"10.0.0.1", "192.0.2.5", "2001:db8::5"}, "TCP 10.0.0.1:80 ->", "TCP 192.0.2.5:80 ->", "TCP [2001:db8::5]:80 ->"),
		want: []string{
			"KIPVS-CLUSTER-IP 10.0.0.1,tcp:80",
			"KIPVS-EXTERNAL-IP 192.0.2.5,tcp:80",
			"KIPVS-EXTERNAL-IP-6 2001:db8::5,tcp:80",
			"KIPVS-VIPS 10.0.0.1",
			"KIPVS-VIPS 192.0.2.5",
			"KIPVS-VIPS-6 2001:db8::5",
		},
	}, {
		name: "external IP, Local",
		svc:  service(external("192.0.2.5"), local),
		st:   state([]string{"10.0.0.1", "192.0.2.5"}, "TCP 10.0.0.1:80 ->", "TCP 192.0.2.5:80 ->"),
		want: []string{
			"KIPVS-CLUSTER-IP 10.0.0.1,tcp:80",
			"KIPVS-EXTERNAL-IP-LOCAL 192.0.2.5,tcp:80",
			"KIPVS-VIPS 10.0.0.1",
			"KIPVS-VIPS 192.0.2.5",
		},
	}, {
		name: "load balancer, Cluster, no source ranges",
		svc:  service(lbType("203.0.113.7")),
		st:   state([]string{"10.0.0.1", "203.0.113.7"}, "TCP 10.0.0.1:80 ->", "TCP 203.0.113.7:80 ->", "TCP 192.168.1.10:30080 ->"),
		want: []string{
			"KIPVS-CLUSTER-IP 10.0.0.1,tcp:80",
			"KIPVS-LOAD-BALANCER 203.0.113.7,tcp:80",
			"KIPVS-NODE-PORT 192.168.1.10,tcp:30080",
			"KIPVS-VIPS 10.0.0.1",
			"KIPVS-VIPS 203.0.113.7",
		},
	}, {
		name: "load balancer, Local, health check, source ranges with endpoints and the node",
		svc: service(lbType("203.0.113.7"), local, healthCheck(32000),
			sourceRangesOpt("198.51.100.0/24", " 192.168.1.0/24", "10.9.9.9/8", "2001:db8::/32", "bogus")),
		st:  state([]string{"10.0.0.1", "203.0.113.7"}, "TCP 10.0.0.1:80 -> 10.1.0.1:8080", "TCP 203.0.113.7:80 -> 10.1.0.1:8080"),
		cfg: nodeCfg,
		want: []string{
			"KIPVS-CLUSTER-IP 10.0.0.1,tcp:80",
			"KIPVS-HEALTH-CHECK-NODE-PORT 32000",
			"KIPVS-LB-SOURCE-CIDR 203.0.113.7,tcp:80,10.0.0.0/8",
			"KIPVS-LB-SOURCE-CIDR 203.0.113.7,tcp:80,192.168.1.0/24",
			"KIPVS-LB-SOURCE-CIDR 203.0.113.7,tcp:80,198.51.100.0/24",
			"KIPVS-LB-SOURCE-IP 203.0.113.7,tcp:80,10.1.0.1",
			"KIPVS-LB-SOURCE-IP 203.0.113.7,tcp:80,203.0.113.7",
			"KIPVS-LOAD-BALANCER-FW 203.0.113.7,tcp:80",
			"KIPVS-LOAD-BALANCER-LOCAL 203.0.113.7,tcp:80",
			"KIPVS-LOOP-BACK 10.1.0.1,tcp:8080,10.1.0.1",
			"KIPVS-VIPS 10.0.0.1",
			"KIPVS-VIPS 203.0.113.7",
		},
	}, {
		name: "source ranges without a node IP: the node is filtered",
		svc:  service(lbType("203.0.113.7"), sourceRangesOpt("198.51.100.0/24")),
		st:   state([]string{"203.0.113.7"}, "TCP 203.0.113.7:80 ->"),
		cfg:  nodeCfg,
		want: []string{
			"KIPVS-LB-SOURCE-CIDR 203.0.113.7,tcp:80,198.51.100.0/24",
			"KIPVS-LOAD-BALANCER 203.0.113.7,tcp:80",
			"KIPVS-LOAD-BALANCER-FW 203.0.113.7,tcp:80",
			"KIPVS-VIPS 203.0.113.7",
		},
	}, {
		name: "source ranges from the annotation when the field is empty",
		svc: service(lbType("203.0.113.7"), func(s *v1.Service) {
			s.Annotations = map[string]string{proxy.AnnotationSourceRanges: "198.51.100.0/24, 198.51.101.0/24"}
		}),
		st: state([]string{"203.0.113.7"}, "TCP 203.0.113.7:80 ->"),
		want: []string{
			"KIPVS-LB-SOURCE-CIDR 203.0.113.7,tcp:80,198.51.100.0/24",
			"KIPVS-LB-SOURCE-CIDR 203.0.113.7,tcp:80,198.51.101.0/24",
			"KIPVS-LOAD-BALANCER 203.0.113.7,tcp:80",
			"KIPVS-LOAD-BALANCER-FW 203.0.113.7,tcp:80",
			"KIPVS-VIPS 203.0.113.7",
		},
	}, {
		name: "a /0 range lifts filtering for its family only",
		svc:  service(lbType("203.0.113.7", "2001:db8::7"), sourceRangesOpt("0.0.0.0/0")),
		st:   state([]string{"203.0.113.7", "2001:db8::7"}, "TCP 203.0.113.7:80 ->", "TCP [2001:db8::7]:80 ->"),
		want: []string{
			"KIPVS-LOAD-BALANCER 203.0.113.7,tcp:80",
			"KIPVS-LOAD-BALANCER-6 2001:db8::7,tcp:80",
			"KIPVS-LOAD-BALANCER-FW-6 2001:db8::7,tcp:80",
			"KIPVS-VIPS 203.0.113.7",
			"KIPVS-VIPS-6 2001:db8::7",
		},
	}, {
		name: "health check port only for Local load balancers",
		svc:  service(lbType("203.0.113.7"), healthCheck(32000)),
		st:   state([]string{"203.0.113.7"}, "TCP 203.0.113.7:80 ->"),
		want: []string{"KIPVS-LOAD-BALANCER 203.0.113.7,tcp:80", "KIPVS-VIPS 203.0.113.7"},
	}, {
		name: "stale ingress of a Service that is no longer a LoadBalancer is not an LB",
		svc: service(func(s *v1.Service) {
			s.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: "203.0.113.7"}}
		}),
		st:   state([]string{"10.0.0.1"}, "TCP 10.0.0.1:80 ->"),
		want: []string{"KIPVS-CLUSTER-IP 10.0.0.1,tcp:80", "KIPVS-VIPS 10.0.0.1"},
	}, {
		name: "nil state: no entries",
		svc:  service(),
		st:   nil,
		want: nil,
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := entriesOf(resolved(tc.svc, tc.st), tc.cfg)
			if g := lines(got); !slices.Equal(g, tc.want) {
				t.Errorf("entries:\n  got  %s\n  want %s", strings.Join(g, "\n       "), strings.Join(tc.want, "\n       "))
			}
			defs := map[SetName]SetDef{}
			for _, d := range Sets(tc.cfg) {
				defs[d.Name] = d
			}
			for n, es := range got {
				d, ok := defs[n]
				if !ok {
					t.Errorf("entries for undefined set %s", n)
					continue
				}
				for e := range es {
					if err := d.Check(e); err != nil {
						t.Error(err)
					}
				}
			}
		})
	}
}

// From a real BuildService: the entries follow the desired state (ready endpoints only,
// node IPs from the proxy config).
func TestAppendMembersFromBuildService(t *testing.T) {
	svc := service(lbType("203.0.113.7"), func(s *v1.Service) { s.Spec.Ports[0].TargetPort.IntVal = 8080 })
	ptr := func(s string) *string { return &s }
	port, proto := int32(8080), v1.ProtocolTCP
	no := false
	sl := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "ns", Name: "web-1", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr("http"), Port: &port, Protocol: &proto}},
		Endpoints: []discoveryv1.Endpoint{
			{Addresses: []string{"10.1.0.1"}, NodeName: ptr("node-a")},
			{Addresses: []string{"10.1.0.2"}, NodeName: ptr("node-b"), Conditions: discoveryv1.EndpointConditions{Ready: &no}},
		},
	}
	pcfg := &proxy.Config{DefaultScheduler: "rr", NodeName: "node-a", NodeIPs: []netip.Addr{netip.MustParseAddr("192.168.1.10")}}
	st := proxy.BuildService(svc, []*discoveryv1.EndpointSlice{sl}, pcfg)
	want := []string{
		"KIPVS-CLUSTER-IP 10.0.0.1,tcp:80",
		"KIPVS-LOAD-BALANCER 203.0.113.7,tcp:80",
		"KIPVS-LOOP-BACK 10.1.0.1,tcp:8080,10.1.0.1",
		"KIPVS-NODE-PORT 192.168.1.10,tcp:30080",
		"KIPVS-VIPS 10.0.0.1",
		"KIPVS-VIPS 203.0.113.7",
	}
	if got := lines(entriesOf(st, Config{})); !slices.Equal(got, want) {
		t.Errorf("entries:\n  got  %v\n  want %v", got, want)
	}
}

// An external IP written with leading zeros (accepted by old API servers, read as decimal
// by Kubernetes) gets its VIP entries, as BuildService gives it a virtual server: the
// firewall reads Service addresses with the proxy's own parser.
func TestLegacyIPv4AddressAgreesWithBuildService(t *testing.T) {
	svc := service(external("010.000.0.7"))
	st := proxy.BuildService(svc, nil, &proxy.Config{DefaultScheduler: "rr", NodeName: "node-a"})
	if st.VSes[model.VSKey{Addr: netip.MustParseAddr("10.0.0.7"), Proto: model.TCP, Port: 80}] == nil {
		t.Fatalf("BuildService made no virtual server for 010.000.0.7:80: %v", st.VSes)
	}
	if got := lines(entriesOf(st, Config{})); !slices.Contains(got, "KIPVS-VIPS 10.0.0.7") {
		t.Errorf("no VIP entry for the external IP 010.000.0.7: %v", got)
	}
}

// externalTrafficPolicy: Local: every external address and port is in the in-cluster set
// with the port's mark, but only while the Service holds its firewall-mark virtual server
// (a Service that lost it to another one would mark traffic for the winner's endpoints).
func TestAppendMembersInClusterMarks(t *testing.T) {
	svc := service(lbType("203.0.113.7"), local, func(s *v1.Service) { s.Spec.Ports[0].TargetPort.IntVal = 8080 })
	pcfg := &proxy.Config{DefaultScheduler: "rr", NodeName: "node-a", NodeIPs: []netip.Addr{netip.MustParseAddr("192.168.1.10")}}
	st := proxy.BuildService(svc, nil, pcfg)
	mark := model.InClusterMark(30080, model.TCP, -1)
	var got []string
	for _, l := range lines(entriesOf(st, Config{})) {
		if strings.HasPrefix(l, SetInClusterLocal+" ") {
			got = append(got, l)
		}
	}
	want := []string{
		fmt.Sprintf("%s 192.168.1.10,tcp:30080 skbmark %#x", SetInClusterLocal, mark),
		fmt.Sprintf("%s 203.0.113.7,tcp:80 skbmark %#x", SetInClusterLocal, mark),
	}
	if !slices.Equal(got, want) {
		t.Errorf("in-cluster entries:\n  got  %v\n  want %v", got, want)
	}
	delete(st.VSes, model.FWMarkKey(mark, false)) // lost to another Service
	for _, l := range lines(entriesOf(st, Config{})) {
		if strings.HasPrefix(l, SetInClusterLocal+" ") {
			t.Errorf("entry without the firewall-mark virtual server: %s", l)
		}
	}
}

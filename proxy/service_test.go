package proxy

import (
	"reflect"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/kube-ipvs/kube-ipvs/model"
)

func TestBuildServiceIgnored(t *testing.T) {
	sl := []*discoveryv1.EndpointSlice{v4("s1", httpPort, ep("10.1.0.1"))}
	cases := []struct {
		name string
		svc  *v1.Service
	}{
		{"nil Service", nil},
		{"ExternalName", service(svcType(v1.ServiceTypeExternalName), clusterIPs())},
		{"ExternalName even with a stale ClusterIP", service(svcType(v1.ServiceTypeExternalName))},
		{"headless clusterIP None", service(clusterIPs("None"))},
		{"headless legacy clusterIP None", service(legacyClusterIP("None"))},
		{"service-proxy-name label", service(label(LabelServiceProxyName, "other-proxy"))},
		{"service-proxy-name label empty value", service(label(LabelServiceProxyName, ""))},
		{"no ClusterIP allocated", service(clusterIPs(), externalIPs("192.0.2.1"))},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if st := BuildService(tc.svc, sl, config()); st != nil {
				t.Errorf("BuildService = %v, want nil", vses(st))
			}
		})
	}
}

func TestBuildServiceTypesAndAddresses(t *testing.T) {
	sl := []*discoveryv1.EndpointSlice{v4("s1", httpPort, ep("10.1.0.1"))}
	nodes := config(nodeIPs("192.168.1.10", "192.168.1.11"))
	runBuildCases(t, []buildCase{{
		name: "ClusterIP",
		svc:  service(), slices: sl,
		want: []string{vs("TCP 10.0.0.1:80 rr", "10.1.0.1:8080")},
		bind: []string{"10.0.0.1"},
	}, {
		name: "nil config acts as empty config with scheduler rr",
		svc:  service(), slices: sl, cfg: &Config{},
		want: []string{vs("TCP 10.0.0.1:80 rr", "10.1.0.1:8080")},
		bind: []string{"10.0.0.1"},
	}, {
		name: "legacy spec.clusterIP only",
		svc:  service(legacyClusterIP("10.0.0.7")), slices: sl,
		want: []string{vs("TCP 10.0.0.7:80 rr", "10.1.0.1:8080")},
		bind: []string{"10.0.0.7"},
	}, {
		name: "legacy clusterIP with leading zeros is read as decimal",
		svc:  service(legacyClusterIP("010.000.000.010")), slices: sl,
		want: []string{vs("TCP 10.0.0.10:80 rr", "10.1.0.1:8080")},
		bind: []string{"10.0.0.10"},
	}, {
		name: "NodePort: one VS per node IP, node IPs not bound",
		svc:  service(svcType(v1.ServiceTypeNodePort), ports(tcp("http", 80, 30080))), slices: sl, cfg: nodes,
		want: []string{
			vs("TCP 10.0.0.1:80 rr", "10.1.0.1:8080"),
			vs("TCP 192.168.1.10:30080 rr", "10.1.0.1:8080"),
			vs("TCP 192.168.1.11:30080 rr", "10.1.0.1:8080"),
		},
		bind: []string{"10.0.0.1"},
	}, {
		name: "nodePort 0 gives no node VS even with node IPs",
		svc:  service(), slices: sl, cfg: nodes,
		want: []string{vs("TCP 10.0.0.1:80 rr", "10.1.0.1:8080")},
		bind: []string{"10.0.0.1"},
	}, {
		name: "node IPs from config are deduped and unmapped",
		svc:  service(ports(tcp("http", 80, 30080))), slices: sl,
		cfg: config(nodeIPs("192.168.1.10", "::ffff:192.168.1.10")),
		want: []string{
			vs("TCP 10.0.0.1:80 rr", "10.1.0.1:8080"),
			vs("TCP 192.168.1.10:30080 rr", "10.1.0.1:8080"),
		},
		bind: []string{"10.0.0.1"},
	}, {
		name: "LoadBalancer with ingress IPs and node ports",
		svc:  service(lb("203.0.113.1", "203.0.113.2"), ports(tcp("http", 80, 30080))), slices: sl, cfg: config(nodeIPs("192.168.1.10")),
		want: []string{
			vs("TCP 10.0.0.1:80 rr", "10.1.0.1:8080"),
			vs("TCP 192.168.1.10:30080 rr", "10.1.0.1:8080"),
			vs("TCP 203.0.113.1:80 rr", "10.1.0.1:8080"),
			vs("TCP 203.0.113.2:80 rr", "10.1.0.1:8080"),
		},
		bind: []string{"10.0.0.1", "203.0.113.1", "203.0.113.2"},
	}, {
		name: "LoadBalancer ingress: ipMode Proxy and hostname-only skipped, ipMode VIP kept",
		svc: service(lb(), ingress(
			v1.LoadBalancerIngress{IP: "203.0.113.1", IPMode: ptr(v1.LoadBalancerIPModeProxy)},
			v1.LoadBalancerIngress{Hostname: "lb.example.com"},
			v1.LoadBalancerIngress{IP: "203.0.113.2", IPMode: ptr(v1.LoadBalancerIPModeVIP)},
		)),
		slices: sl,
		want: []string{
			vs("TCP 10.0.0.1:80 rr", "10.1.0.1:8080"),
			vs("TCP 203.0.113.2:80 rr", "10.1.0.1:8080"),
		},
		bind: []string{"10.0.0.1", "203.0.113.2"},
	}, {
		name: "stale ingress status on a non-LoadBalancer Service is ignored",
		svc:  service(ingress(v1.LoadBalancerIngress{IP: "203.0.113.1"})), slices: sl,
		want: []string{vs("TCP 10.0.0.1:80 rr", "10.1.0.1:8080")},
		bind: []string{"10.0.0.1"},
	}, {
		name: "externalIPs are VSes and bound",
		svc:  service(externalIPs("192.0.2.1", "192.0.2.2")), slices: sl,
		want: []string{
			vs("TCP 10.0.0.1:80 rr", "10.1.0.1:8080"),
			vs("TCP 192.0.2.1:80 rr", "10.1.0.1:8080"),
			vs("TCP 192.0.2.2:80 rr", "10.1.0.1:8080"),
		},
		bind: []string{"10.0.0.1", "192.0.2.1", "192.0.2.2"},
	}, {
		name: "same address in externalIPs and LB ingress gives one VS",
		svc:  service(externalIPs("203.0.113.1", "203.0.113.1"), lb("203.0.113.1")), slices: sl,
		want: []string{
			vs("TCP 10.0.0.1:80 rr", "10.1.0.1:8080"),
			vs("TCP 203.0.113.1:80 rr", "10.1.0.1:8080"),
		},
		bind: []string{"10.0.0.1", "203.0.113.1"},
	}, {
		name: "bad IPs are reported by field and value and skipped",
		svc: service(clusterIPs("10.0.0.1", "fd00::zz"), externalIPs("192.0.2.1", "not-an-ip", "0.0.0.0", "127.0.0.1", "fe80::1%eth0"),
			lb(), ingress(v1.LoadBalancerIngress{IP: "203.0.113.300"}, v1.LoadBalancerIngress{IP: "224.0.0.1"})),
		slices: sl,
		want: []string{
			vs("TCP 10.0.0.1:80 rr", "10.1.0.1:8080"),
			vs("TCP 192.0.2.1:80 rr", "10.1.0.1:8080"),
		},
		bind:     []string{"10.0.0.1", "192.0.2.1"},
		problems: []string{"InvalidIP", "InvalidIP", "InvalidIP", "InvalidIP", "InvalidIP", "InvalidIP", "InvalidIP"},
		msgs: []string{
			`spec.clusterIPs[1] "fd00::zz" is not an IP address`,
			`spec.externalIPs[1] "not-an-ip" is not an IP address`,
			`spec.externalIPs[2] "0.0.0.0" is the unspecified address`,
			`spec.externalIPs[3] "127.0.0.1" is a loopback address`,
			`spec.externalIPs[4] "fe80::1%eth0" has a zone`,
			`status.loadBalancer.ingress[0].ip "203.0.113.300" is not an IP address`,
			`status.loadBalancer.ingress[1].ip "224.0.0.1" is a multicast address`,
		},
	}})
}

func TestBuildServicePorts(t *testing.T) {
	runBuildCases(t, []buildCase{{
		name: "UDP and SCTP ports",
		svc:  service(ports(svcPort("dns", v1.ProtocolUDP, 53, 0), svcPort("sig", v1.ProtocolSCTP, 3868, 0))),
		slices: []*discoveryv1.EndpointSlice{v4("s1",
			epPorts(sp("dns", v1.ProtocolUDP, 5353), sp("sig", v1.ProtocolSCTP, 3869)), ep("10.1.0.1"))},
		want: []string{
			vs("UDP 10.0.0.1:53 rr", "10.1.0.1:5353"),
			vs("SCTP 10.0.0.1:3868 rr", "10.1.0.1:3869"),
		},
		bind: []string{"10.0.0.1"},
	}, {
		name: "unset protocols default to TCP on both sides",
		svc:  service(ports(svcPort("", "", 80, 0))),
		slices: []*discoveryv1.EndpointSlice{v4("s1",
			epPorts(discoveryv1.EndpointPort{Port: ptr(int32(8080))}), ep("10.1.0.1"))},
		want: []string{vs("TCP 10.0.0.1:80 rr", "10.1.0.1:8080")},
		bind: []string{"10.0.0.1"},
	}, {
		name:     "unsupported protocol is skipped with a problem",
		svc:      service(ports(svcPort("x", "ICMP", 1, 0), tcp("http", 80, 0))),
		slices:   []*discoveryv1.EndpointSlice{v4("s1", httpPort, ep("10.1.0.1"))},
		want:     []string{vs("TCP 10.0.0.1:80 rr", "10.1.0.1:8080")},
		bind:     []string{"10.0.0.1"},
		problems: []string{"UnsupportedProtocol"},
		msgs:     []string{`spec.ports[0] (name "x") protocol "ICMP"`},
	}, {
		name:     "only unsupported ports: nothing to bind",
		svc:      service(ports(svcPort("x", "ICMP", 1, 0))),
		problems: []string{"UnsupportedProtocol"},
	}, {
		name:     "port and nodePort out of range",
		svc:      service(ports(tcp("a", 0, 0), tcp("b", 70000, 0), tcp("c", 81, 70000))),
		cfg:      config(nodeIPs("192.168.1.10")),
		want:     []string{vs("TCP 10.0.0.1:81 rr")},
		bind:     []string{"10.0.0.1"},
		problems: []string{"InvalidPort", "InvalidPort", "InvalidPort"},
		msgs:     []string{`spec.ports[0] (name "a") port 0`, `spec.ports[1] (name "b") port 70000`, `spec.ports[2] (name "c") nodePort 70000`},
	}, {
		name: "named ports in a multi-port slice",
		svc:  service(ports(tcp("http", 80, 0), tcp("https", 443, 0))),
		slices: []*discoveryv1.EndpointSlice{v4("s1",
			epPorts(sp("https", v1.ProtocolTCP, 8443), sp("http", v1.ProtocolTCP, 8080)), ep("10.1.0.1"), ep("10.1.0.2"))},
		want: []string{
			vs("TCP 10.0.0.1:80 rr", "10.1.0.1:8080", "10.1.0.2:8080"),
			vs("TCP 10.0.0.1:443 rr", "10.1.0.1:8443", "10.1.0.2:8443"),
		},
		bind: []string{"10.0.0.1"},
	}, {
		name: "named targetPort resolving to different numbers per slice",
		svc:  service(),
		slices: []*discoveryv1.EndpointSlice{
			v4("s1", epPorts(sp("http", v1.ProtocolTCP, 8080)), ep("10.1.0.1")),
			v4("s2", epPorts(sp("http", v1.ProtocolTCP, 9090)), ep("10.1.0.2")),
		},
		want: []string{vs("TCP 10.0.0.1:80 rr", "10.1.0.1:8080", "10.1.0.2:9090")},
		bind: []string{"10.0.0.1"},
	}, {
		name: "same name, TCP and UDP: each protocol takes its own slice port",
		svc:  service(ports(svcPort("dns", v1.ProtocolTCP, 53, 0), svcPort("dns", v1.ProtocolUDP, 53, 0))),
		slices: []*discoveryv1.EndpointSlice{v4("s1",
			epPorts(sp("dns", v1.ProtocolUDP, 1053), sp("dns", v1.ProtocolTCP, 2053)), ep("10.1.0.1"))},
		want: []string{
			vs("TCP 10.0.0.1:53 rr", "10.1.0.1:2053"),
			vs("UDP 10.0.0.1:53 rr", "10.1.0.1:1053"),
		},
		bind: []string{"10.0.0.1"},
	}, {
		name:   "protocol mismatch: no real servers",
		svc:    service(),
		slices: []*discoveryv1.EndpointSlice{v4("s1", epPorts(sp("http", v1.ProtocolUDP, 8080)), ep("10.1.0.1"))},
		want:   []string{vs("TCP 10.0.0.1:80 rr")},
		bind:   []string{"10.0.0.1"},
	}, {
		name:   "name mismatch: no real servers",
		svc:    service(ports(tcp("", 80, 0))),
		slices: []*discoveryv1.EndpointSlice{v4("s1", httpPort, ep("10.1.0.1"))},
		want:   []string{vs("TCP 10.0.0.1:80 rr")},
		bind:   []string{"10.0.0.1"},
	}, {
		name: "the same problem found for two ports is reported once",
		svc:  service(ports(tcp("http", 80, 0), tcp("https", 443, 0))),
		slices: []*discoveryv1.EndpointSlice{v4("s1",
			epPorts(sp("http", v1.ProtocolTCP, 8080), sp("https", v1.ProtocolTCP, 8443)), ep("10.1.0.1"), ep("bogus"))},
		want: []string{
			vs("TCP 10.0.0.1:80 rr", "10.1.0.1:8080"),
			vs("TCP 10.0.0.1:443 rr", "10.1.0.1:8443"),
		},
		bind:     []string{"10.0.0.1"},
		problems: []string{"InvalidEndpoint"},
		msgs:     []string{`EndpointSlice s1 endpoints[1].addresses[0] "bogus" is not an IP address; the endpoint is not used`},
	}, {
		name: "slice port without number or out of range is reported and skipped",
		svc:  service(),
		slices: []*discoveryv1.EndpointSlice{
			v4("s1", epPorts(discoveryv1.EndpointPort{Name: ptr("http")}), ep("10.1.0.1")),
			v4("s2", epPorts(sp("http", v1.ProtocolTCP, 0)), ep("10.1.0.2")),
			v4("s3", httpPort, ep("10.1.0.3")),
		},
		want:     []string{vs("TCP 10.0.0.1:80 rr", "10.1.0.3:8080")},
		bind:     []string{"10.0.0.1"},
		problems: []string{"InvalidEndpoint", "InvalidEndpoint"},
		msgs:     []string{`EndpointSlice s1 port "http" has number unset`, `EndpointSlice s2 port "http" has number 0`},
	}})
}

func TestBuildServiceIgnoresHeadlessLabelledSlices(t *testing.T) {
	labelled := v4("s2", httpPort, ep("10.1.0.2"))
	labelled.Labels[v1.IsHeadlessService] = ""
	runBuildCases(t, []buildCase{{
		name:   "a slice labelled service.kubernetes.io/headless gives no endpoints",
		svc:    service(),
		slices: []*discoveryv1.EndpointSlice{v4("s1", httpPort, ep("10.1.0.1")), labelled},
		want:   []string{vs("TCP 10.0.0.1:80 rr", "10.1.0.1:8080")},
		bind:   []string{"10.0.0.1"},
	}, {
		name:   "with only labelled slices the Service has no endpoints",
		svc:    service(),
		slices: []*discoveryv1.EndpointSlice{labelled},
		want:   []string{vs("TCP 10.0.0.1:80 rr")},
		bind:   []string{"10.0.0.1"},
	}})
}

func TestBuildServiceDualStack(t *testing.T) {
	dual := []*discoveryv1.EndpointSlice{
		v4("s4", httpPort, ep("10.1.0.1")),
		v6("s6", httpPort, ep("fd00:1::1")),
		slice("sf", discoveryv1.AddressTypeFQDN, httpPort, ep("pod.example.com")),
	}
	runBuildCases(t, []buildCase{{
		name: "each VS gets endpoints of its own family only",
		svc: service(clusterIPs("10.0.0.1", "fd00::1"), externalIPs("192.0.2.1", "2001:db8::1"),
			ports(tcp("http", 80, 30080))),
		slices: dual,
		cfg:    config(nodeIPs("192.168.1.10", "2001:db8:1::10")),
		want: []string{
			vs("TCP 10.0.0.1:80 rr", "10.1.0.1:8080"),
			vs("TCP 192.0.2.1:80 rr", "10.1.0.1:8080"),
			vs("TCP 192.168.1.10:30080 rr", "10.1.0.1:8080"),
			vs("TCP [2001:db8::1]:80 rr", "[fd00:1::1]:8080"),
			vs("TCP [2001:db8:1::10]:30080 rr", "[fd00:1::1]:8080"),
			vs("TCP [fd00::1]:80 rr", "[fd00:1::1]:8080"),
		},
		bind: []string{"10.0.0.1", "192.0.2.1", "2001:db8::1", "fd00::1"},
	}, {
		name:   "IPv6-only Service ignores IPv4 slices",
		svc:    service(clusterIPs("fd00::1")),
		slices: dual,
		want:   []string{vs("TCP [fd00::1]:80 rr", "[fd00:1::1]:8080")},
		bind:   []string{"fd00::1"},
	}, {
		name: "address of the wrong family in a slice is reported and skipped",
		svc:  service(),
		slices: []*discoveryv1.EndpointSlice{
			v4("s4", httpPort, ep("fd00:1::9"), ep("10.1.0.1"), ep("bogus"), discoveryv1.Endpoint{}),
		},
		want:     []string{vs("TCP 10.0.0.1:80 rr", "10.1.0.1:8080")},
		bind:     []string{"10.0.0.1"},
		problems: []string{"InvalidEndpoint", "InvalidEndpoint"},
		msgs: []string{
			`EndpointSlice s4 endpoints[2].addresses[0] "bogus" is not an IP address`,
			`EndpointSlice s4 has addressType IPv4 but endpoints[0].addresses[0] is "fd00:1::9"`,
		},
	}})
}

func TestBuildServiceForeignSlicesIgnored(t *testing.T) {
	other := v4("o1", httpPort, ep("10.9.0.1"))
	other.Labels[discoveryv1.LabelServiceName] = "other"
	otherNS := v4("o2", httpPort, ep("10.9.0.2"))
	otherNS.Namespace = "elsewhere"
	unlabelled := v4("o3", httpPort, ep("10.9.0.3"))
	unlabelled.Labels = nil
	runBuildCases(t, []buildCase{{
		name:   "slices of other Services, other namespaces, unlabelled and nil",
		svc:    service(),
		slices: []*discoveryv1.EndpointSlice{other, nil, otherNS, unlabelled, v4("s1", httpPort, ep("10.1.0.1"))},
		want:   []string{vs("TCP 10.0.0.1:80 rr", "10.1.0.1:8080")},
		bind:   []string{"10.0.0.1"},
	}})
}

// TestBuildServiceSharesRealsPerPort checks that the virtual servers of one port, family
// and traffic policy share one real-server map (one copy per address cost tens of MiB at
// 50,000 Services; the maps are read-only, see model.VirtualServer), and that other ports
// and policies get their own.
func TestBuildServiceSharesRealsPerPort(t *testing.T) {
	svc := service(externalIPs("192.0.2.1", "192.0.2.2"), ports(tcp("http", 80, 0), tcp("https", 443, 0)))
	slice := v4("s1", epPorts(sp("http", v1.ProtocolTCP, 8080), sp("https", v1.ProtocolTCP, 8443)), ep("10.1.0.1"))
	st := BuildService(svc, []*discoveryv1.EndpointSlice{slice}, config())
	first := map[uint16]map[model.RSKey]uint32{}
	for k, v := range st.VSes {
		if len(v.Reals) != 1 {
			t.Fatalf("%v has %d real servers, want 1", k, len(v.Reals))
		}
		if first[k.Port] == nil {
			first[k.Port] = v.Reals
		} else if !sameMap(first[k.Port], v.Reals) {
			t.Errorf("%v does not share the real servers of the other virtual servers of port %d", k, k.Port)
		}
	}
	if len(st.VSes) != 6 || len(first) != 2 {
		t.Fatalf("%d virtual servers on %d ports, want 6 on 2 (80, 443): %v", len(st.VSes), len(first), vses(st))
	}
	if sameMap(first[80], first[443]) {
		t.Error("ports 80 and 443 share one real-server map")
	}
}

// sameMap reports whether a and b are one map (not equal copies).
func sameMap(a, b map[model.RSKey]uint32) bool {
	return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}

// TestBuildServiceDeterministic: slice order must not change the result or the problems.
func TestBuildServiceDeterministic(t *testing.T) {
	a := v4("a", httpPort, ep("10.1.0.1", draining), ep("bad-a"))
	b := v4("b", httpPort, ep("10.1.0.1", ready(false)), ep("bad-b"))
	svc := service(externalIPs("x", "y"), sched("nope"))
	st1 := BuildService(svc, []*discoveryv1.EndpointSlice{a, b}, config())
	st2 := BuildService(svc, []*discoveryv1.EndpointSlice{b, a}, config())
	if g1, g2 := vses(st1), vses(st2); !slices.Equal(g1, g2) {
		t.Errorf("VSes differ with slice order:\n%v\n%v", g1, g2)
	}
	if len(st1.Reasons) != len(st2.Reasons) {
		t.Fatalf("problems differ: %v vs %v", st1.Reasons, st2.Reasons)
	}
	for i := range st1.Reasons {
		if st1.Reasons[i] != st2.Reasons[i] {
			t.Errorf("problem %d differs: %v vs %v", i, st1.Reasons[i], st2.Reasons[i])
		}
	}
	want := []string{"InvalidEndpoint", "InvalidEndpoint", "InvalidIP", "InvalidIP", "InvalidScheduler"}
	if got := reasons(st1); !slices.Equal(got, want) {
		t.Errorf("reasons = %v, want %v", got, want)
	}
}

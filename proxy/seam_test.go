package proxy

import (
	"net/netip"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/kube-ipvs/kube-ipvs/model"
)

// Everything the ipsets and the iptables fallback need comes with the state: each virtual
// server's kind and the Service-wide policy. A backend that re-derived them from the
// Service could disagree with this function (as one once did about ipMode: Proxy).
func TestBuildServiceCarriesKindsAndPolicy(t *testing.T) {
	svc := service(lb("203.0.113.1"), externalIPs("192.0.2.1"), ports(tcp("http", 80, 30080)), etpLocal,
		ingress(v1.LoadBalancerIngress{IP: "203.0.113.9", IPMode: ptr(v1.LoadBalancerIPModeProxy)}),
		func(s *v1.Service) { s.Spec.LoadBalancerSourceRanges = []string{"192.0.2.0/24"} })
	st := BuildService(svc, nil, config(nodeIPs("192.168.1.10")))
	got := map[string]model.VSKind{}
	for k, v := range st.VSes {
		got[k.String()] = v.Kind
	}
	want := map[string]model.VSKind{
		"TCP 10.0.0.1:80":        model.KindClusterIP,
		"TCP 192.0.2.1:80":       model.KindExternalIP,
		"TCP 203.0.113.1:80":     model.KindLoadBalancer,
		"TCP 192.168.1.10:30080": model.KindNodePort,
		"FWM 0x75802001 IPv4":    model.KindInCluster,
	}
	if len(got) != len(want) {
		t.Fatalf("virtual servers %v, want %v (ipMode Proxy ingress must have none)", got, want)
	}
	for k, kind := range want {
		if got[k] != kind {
			t.Errorf("%s: kind %v, want %v", k, got[k], kind)
		}
	}
	if !st.LoadBalancer || !st.ExternalLocal {
		t.Errorf("LoadBalancer %v, ExternalLocal %v; want both", st.LoadBalancer, st.ExternalLocal)
	}
	if p, filtered := st.SourceRanges.Of(false); !filtered || len(p) != 1 || p[0].String() != "192.0.2.0/24" {
		t.Errorf("source ranges %v %v, want [192.0.2.0/24] filtered", p, filtered)
	}
}

// Node ports belong to the Service's own families only: a single-stack Service has no
// virtual server at the node's address of the other family, where a node process listening
// on *:nodePort must stay reachable.
func TestBuildServiceNodePortsOnlyInTheServiceFamilies(t *testing.T) {
	sl := []*discoveryv1.EndpointSlice{v4("s4", httpPort, ep("10.1.0.1")), v6("s6", httpPort, ep("fd00:1::1"))}
	cfg := config(nodeIPs("192.168.1.10", "2001:db8:1::10"))
	runBuildCases(t, []buildCase{{
		name:   "IPv4-only Service: no NodePort at the node's IPv6 address",
		svc:    service(ports(tcp("http", 80, 30080)), func(s *v1.Service) { s.Spec.IPFamilies = []v1.IPFamily{v1.IPv4Protocol} }),
		slices: sl, cfg: cfg,
		want: []string{vs("TCP 10.0.0.1:80 rr", "10.1.0.1:8080"), vs("TCP 192.168.1.10:30080 rr", "10.1.0.1:8080")},
		bind: []string{"10.0.0.1"},
	}, {
		name:   "IPv6-only Service: no NodePort at the node's IPv4 address",
		svc:    service(clusterIPs("fd00::1"), ports(tcp("http", 80, 30080))),
		slices: sl, cfg: cfg,
		want: []string{vs("TCP [2001:db8:1::10]:30080 rr", "[fd00:1::1]:8080"), vs("TCP [fd00::1]:80 rr", "[fd00:1::1]:8080")},
		bind: []string{"fd00::1"},
	}})
}

// An address of the node itself is never bound to kube-ipvs0 (nor, downstream, put into
// the VIP filter): the Service keeps its virtual server, as in kube-proxy, and a Warning
// names the address. Addresses that are never a Service's to take are refused outright.
func TestBuildServiceNeverTakesTheNodesAddresses(t *testing.T) {
	sl := []*discoveryv1.EndpointSlice{v4("s1", httpPort, ep("10.1.0.1"))}
	own := config(func(c *Config) {
		c.HostAddrs = map[netip.Addr]bool{netip.MustParseAddr("192.168.1.10"): true, netip.MustParseAddr("169.254.1.1"): true}
	})
	runBuildCases(t, []buildCase{{
		name: "externalIP that is the node's address: served, not bound",
		svc:  service(externalIPs("192.168.1.10")), slices: sl, cfg: own,
		want:     []string{vs("TCP 10.0.0.1:80 rr", "10.1.0.1:8080"), vs("TCP 192.168.1.10:80 rr", "10.1.0.1:8080")},
		bind:     []string{"10.0.0.1"},
		problems: []string{ReasonNodeAddress},
		msgs:     []string{"spec.externalIPs[0] 192.168.1.10 is an address of this node"},
	}, {
		name: "load-balancer IP that is the node's address: served, not bound",
		svc:  service(lb("192.168.1.10")), slices: sl, cfg: own,
		want:     []string{vs("TCP 10.0.0.1:80 rr", "10.1.0.1:8080"), vs("TCP 192.168.1.10:80 rr", "10.1.0.1:8080")},
		bind:     []string{"10.0.0.1"},
		problems: []string{ReasonNodeAddress},
	}, {
		name: "link-local, broadcast and the pods' gateway are refused",
		svc:  service(externalIPs("169.254.1.1", "fe80::1", "255.255.255.255")), slices: sl, cfg: own,
		want:     []string{vs("TCP 10.0.0.1:80 rr", "10.1.0.1:8080")},
		bind:     []string{"10.0.0.1"},
		problems: []string{ReasonInvalidIP, ReasonInvalidIP, ReasonInvalidIP},
		msgs:     []string{`"169.254.1.1" is a link-local address`, `"fe80::1" is a link-local address`, `"255.255.255.255" is the broadcast address`},
	}})
}

// Duplicate ports (which the API refuses, but manifests are not validated) are reported.
func TestBuildServiceReportsDuplicatePorts(t *testing.T) {
	sl := []*discoveryv1.EndpointSlice{v4("s1", epPorts(sp("http", v1.ProtocolTCP, 8080), sp("web", v1.ProtocolTCP, 8081)), ep("10.1.0.1"))}
	runBuildCases(t, []buildCase{{
		name: "same port twice",
		svc:  service(ports(tcp("http", 80, 30080), tcp("web", 80, 30081))), slices: sl, cfg: config(nodeIPs("192.168.1.10")),
		want: []string{vs("TCP 10.0.0.1:80 rr", "10.1.0.1:8080"), vs("TCP 192.168.1.10:30080 rr", "10.1.0.1:8080"),
			vs("TCP 192.168.1.10:30081 rr", "10.1.0.1:8081")},
		bind:     []string{"10.0.0.1"},
		problems: []string{ReasonDuplicatePort},
		msgs:     []string{`spec.ports[1] (name "web") repeats port 80/TCP of spec.ports[0] (name "http")`},
	}, {
		name: "same node port twice",
		svc:  service(ports(tcp("http", 80, 30080), tcp("web", 81, 30080))), slices: sl, cfg: config(nodeIPs("192.168.1.10")),
		want: []string{vs("TCP 10.0.0.1:80 rr", "10.1.0.1:8080"), vs("TCP 10.0.0.1:81 rr", "10.1.0.1:8081"),
			vs("TCP 192.168.1.10:30080 rr", "10.1.0.1:8080")},
		bind:     []string{"10.0.0.1"},
		problems: []string{ReasonDuplicatePort},
		msgs:     []string{"repeats nodePort 30080/TCP"},
	}})
}

// A huge annotation value is cut, in the message the log and the Event carry.
func TestProblemMessagesAreBounded(t *testing.T) {
	huge := strings.Repeat("x", 10240)
	for _, svc := range []*v1.Service{service(sched(huge)), service(flags(huge + ",y"))} {
		st := BuildService(svc, nil, config())
		if len(st.Reasons) != 1 {
			t.Fatalf("problems %v", st.Reasons)
		}
		m := st.Reasons[0].Message
		if len(m) > maxMessage || !strings.Contains(m, "(10240 bytes)") {
			t.Errorf("message of %d bytes, want <= %d naming the value's length: %.200s", len(m), maxMessage, m)
		}
	}
	long := strings.Repeat("a,", 2000)
	if m := BuildService(service(flags(long)), nil, config()).Reasons[0].Message; len(m) > maxMessage || !strings.HasSuffix(m, "[cut]") {
		t.Errorf("a long list of bad flags gives %d bytes (want <= %d, ending [cut])", len(m), maxMessage)
	}
	if got := quoteValue("héllo"); got != `"héllo"` {
		t.Errorf("short value %s", got)
	}
	if got := quoteValue(strings.Repeat("é", 100)); !strings.HasPrefix(got, `"é`) || strings.Contains(got, `\x`) {
		t.Errorf("cut splits a rune: %s", got)
	}
}

// On the iptables fallback a scheduler annotation does nothing, and the Service is told.
func TestBuildServiceSchedulerIgnoredWithoutIPVS(t *testing.T) {
	st := BuildService(service(sched("lc")), nil, config(func(c *Config) { c.NoSchedulers = true }))
	if len(st.Reasons) != 1 || st.Reasons[0].Reason != ReasonSchedulerIgnored || !strings.Contains(st.Reasons[0].Message, `"lc" has no effect`) {
		t.Errorf("problems %v, want one %s naming \"lc\"", st.Reasons, ReasonSchedulerIgnored)
	}
	if st := BuildService(service(), nil, config(func(c *Config) { c.NoSchedulers = true })); len(st.Reasons) != 0 {
		t.Errorf("a Service without the annotation got %v", st.Reasons)
	}
}

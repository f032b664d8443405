package proxy

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
)

// Builders: each test case states only what differs from a plain ClusterIP Service
// ns/web on 10.0.0.1 with one TCP port "http" 80, and slices labelled for it.

const (
	testNS   = "ns"
	testName = "web"
	thisNode = "node-a"
)

func ptr[T any](v T) *T { return &v }

type svcOpt func(*v1.Service)

func service(opts ...svcOpt) *v1.Service {
	s := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: testName},
		Spec: v1.ServiceSpec{
			Type:       v1.ServiceTypeClusterIP,
			ClusterIP:  "10.0.0.1",
			ClusterIPs: []string{"10.0.0.1"},
			Ports:      []v1.ServicePort{tcp("http", 80, 0)},
		},
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

func svcPort(name string, proto v1.Protocol, port, nodePort int32) v1.ServicePort {
	return v1.ServicePort{Name: name, Protocol: proto, Port: port, NodePort: nodePort}
}
func tcp(name string, port, nodePort int32) v1.ServicePort {
	return svcPort(name, v1.ProtocolTCP, port, nodePort)
}

func ports(ps ...v1.ServicePort) svcOpt { return func(s *v1.Service) { s.Spec.Ports = ps } }
func svcType(t v1.ServiceType) svcOpt   { return func(s *v1.Service) { s.Spec.Type = t } }

// clusterIPs sets both the plural and the singular field, as the API server does.
func clusterIPs(ips ...string) svcOpt {
	return func(s *v1.Service) {
		s.Spec.ClusterIPs = ips
		s.Spec.ClusterIP = ""
		if len(ips) > 0 {
			s.Spec.ClusterIP = ips[0]
		}
	}
}

// legacyClusterIP leaves only the singular field, as on objects from before dual-stack.
func legacyClusterIP(ip string) svcOpt {
	return func(s *v1.Service) { s.Spec.ClusterIPs = nil; s.Spec.ClusterIP = ip }
}
func externalIPs(ips ...string) svcOpt { return func(s *v1.Service) { s.Spec.ExternalIPs = ips } }

// lb makes the Service a LoadBalancer with the given ingress IPs (ipMode unset).
func lb(ips ...string) svcOpt {
	return func(s *v1.Service) {
		s.Spec.Type = v1.ServiceTypeLoadBalancer
		for _, ip := range ips {
			s.Status.LoadBalancer.Ingress = append(s.Status.LoadBalancer.Ingress, v1.LoadBalancerIngress{IP: ip})
		}
	}
}
func ingress(ing ...v1.LoadBalancerIngress) svcOpt {
	return func(s *v1.Service) { s.Status.LoadBalancer.Ingress = append(s.Status.LoadBalancer.Ingress, ing...) }
}
func etpLocal(s *v1.Service) { s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal }
func itpLocal(s *v1.Service) {
	s.Spec.InternalTrafficPolicy = ptr(v1.ServiceInternalTrafficPolicyLocal)
}
func annotation(k, v string) svcOpt {
	return func(s *v1.Service) {
		if s.Annotations == nil {
			s.Annotations = map[string]string{}
		}
		s.Annotations[k] = v
	}
}
func label(k, v string) svcOpt {
	return func(s *v1.Service) {
		if s.Labels == nil {
			s.Labels = map[string]string{}
		}
		s.Labels[k] = v
	}
}
func sched(v string) svcOpt { return annotation(AnnotationScheduler, v) }
func flags(v string) svcOpt { return annotation(AnnotationSchedulerFlags, v) }

// clientIP turns on ClientIP affinity; timeout nil leaves sessionAffinityConfig unset.
func clientIP(timeout *int32) svcOpt {
	return func(s *v1.Service) {
		s.Spec.SessionAffinity = v1.ServiceAffinityClientIP
		if timeout != nil {
			s.Spec.SessionAffinityConfig = &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{TimeoutSeconds: timeout}}
		}
	}
}

// slice builds an EndpointSlice of ns/web. Its name orders slices (BuildService sorts by it).
func slice(name string, at discoveryv1.AddressType, ps []discoveryv1.EndpointPort, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: testNS, Name: name,
			Labels: map[string]string{discoveryv1.LabelServiceName: testName},
		},
		AddressType: at,
		Ports:       ps,
		Endpoints:   eps,
	}
}
func v4(name string, ps []discoveryv1.EndpointPort, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	return slice(name, discoveryv1.AddressTypeIPv4, ps, eps...)
}
func v6(name string, ps []discoveryv1.EndpointPort, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	return slice(name, discoveryv1.AddressTypeIPv6, ps, eps...)
}

func epPorts(ps ...discoveryv1.EndpointPort) []discoveryv1.EndpointPort { return ps }

// sp is a slice port; proto "" leaves the protocol unset (nil).
func sp(name string, proto v1.Protocol, port int32) discoveryv1.EndpointPort {
	p := discoveryv1.EndpointPort{Name: ptr(name), Port: ptr(port)}
	if proto != "" {
		p.Protocol = ptr(proto)
	}
	return p
}

// httpPort is the slice port matching the default Service port "http".
var httpPort = epPorts(sp("http", v1.ProtocolTCP, 8080))

type epOpt func(*discoveryv1.Endpoint)

// ep is a ready endpoint (conditions left nil) on another node.
func ep(addr string, opts ...epOpt) discoveryv1.Endpoint {
	e := discoveryv1.Endpoint{Addresses: []string{addr}, NodeName: ptr("node-b")}
	for _, o := range opts {
		o(&e)
	}
	return e
}
func on(node string) epOpt           { return func(e *discoveryv1.Endpoint) { e.NodeName = ptr(node) } }
func local(e *discoveryv1.Endpoint)  { e.NodeName = ptr(thisNode) }
func noNode(e *discoveryv1.Endpoint) { e.NodeName = nil }
func ready(b bool) epOpt             { return func(e *discoveryv1.Endpoint) { e.Conditions.Ready = ptr(b) } }
func serving(b bool) epOpt {
	return func(e *discoveryv1.Endpoint) { e.Conditions.Serving = ptr(b) }
}
func terminating(b bool) epOpt {
	return func(e *discoveryv1.Endpoint) { e.Conditions.Terminating = ptr(b) }
}

// draining is the state of a pod being deleted that still serves: not ready, serving,
// terminating.
func draining(e *discoveryv1.Endpoint) {
	ready(false)(e)
	serving(true)(e)
	terminating(true)(e)
}
func zones(zs ...string) epOpt {
	return func(e *discoveryv1.Endpoint) {
		if e.Hints == nil {
			e.Hints = &discoveryv1.EndpointHints{}
		}
		for _, z := range zs {
			e.Hints.ForZones = append(e.Hints.ForZones, discoveryv1.ForZone{Name: z})
		}
	}
}
func nodes(ns ...string) epOpt {
	return func(e *discoveryv1.Endpoint) {
		if e.Hints == nil {
			e.Hints = &discoveryv1.EndpointHints{}
		}
		for _, n := range ns {
			e.Hints.ForNodes = append(e.Hints.ForNodes, discoveryv1.ForNode{Name: n})
		}
	}
}

// config is the default test node: node-a, no zone, rr, no node IPs.
func config(opts ...func(*Config)) *Config {
	c := &Config{DefaultScheduler: "rr", NodeName: thisNode}
	for _, o := range opts {
		o(c)
	}
	return c
}
func nodeIPs(ips ...string) func(*Config) {
	return func(c *Config) {
		for _, ip := range ips {
			c.NodeIPs = append(c.NodeIPs, netip.MustParseAddr(ip))
		}
	}
}
func zone(z string) func(*Config)         { return func(c *Config) { c.NodeZone = z } }
func defaultSched(s string) func(*Config) { return func(c *Config) { c.DefaultScheduler = s } }
func unavailable(names ...string) func(*Config) {
	return func(c *Config) {
		c.UnavailableSchedulers = map[string]bool{}
		for _, n := range names {
			c.UnavailableSchedulers[n] = true
		}
	}
}

// vs renders the expected model.VirtualServer.String() of a virtual server: head is the
// first line ("TCP 10.0.0.1:80 rr"), reals are "addr:port" with weight 1.
func vs(head string, reals ...string) string {
	var b strings.Builder
	b.WriteString(head)
	for _, r := range reals {
		fmt.Fprintf(&b, "\n  -> %s weight 1", r)
	}
	return b.String()
}

// vses renders the virtual servers of st in key order.
func vses(st *model.ServiceState) []string {
	keys := make([]model.VSKey, 0, len(st.VSes))
	for k := range st.VSes {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b model.VSKey) int {
		if model.VSKeyLess(a, b) {
			return -1
		}
		if model.VSKeyLess(b, a) {
			return 1
		}
		return 0
	})
	out := make([]string, 0, len(keys))
	for _, k := range keys {
		v := st.VSes[k]
		if v.Key != k {
			out = append(out, fmt.Sprintf("BUG: map key %s holds VS %s", k, v.Key))
		}
		out = append(out, v.String())
	}
	return out
}

// binds renders the Bind list sorted.
func binds(st *model.ServiceState) []string {
	addrs := slices.Clone(st.Bind)
	slices.SortFunc(addrs, netip.Addr.Compare)
	out := make([]string, 0, len(addrs))
	for _, a := range addrs {
		out = append(out, a.String())
	}
	return out
}

func reasons(st *model.ServiceState) []string {
	out := make([]string, 0, len(st.Reasons))
	for _, p := range st.Reasons {
		out = append(out, p.Reason)
	}
	return out
}

// buildCase is one BuildService table case. want lists every virtual server (in key
// order); bind every bound address; problems the Reasons in order; msgs substrings that
// must all appear in the problem messages (joined).
type buildCase struct {
	name     string
	svc      *v1.Service
	slices   []*discoveryv1.EndpointSlice
	cfg      *Config
	want     []string
	bind     []string
	problems []string
	msgs     []string
}

func runBuildCases(t *testing.T, cases []buildCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			if cfg == nil {
				cfg = config()
			}
			st := BuildService(tc.svc, tc.slices, cfg)
			if st == nil {
				t.Fatalf("BuildService returned nil")
			}
			checkState(t, st, tc)
		})
	}
}

func checkState(t *testing.T, st *model.ServiceState, tc buildCase) {
	t.Helper()
	if st.Name != (model.ServiceName{Namespace: testNS, Name: testName}) {
		t.Errorf("Name = %v", st.Name)
	}
	if got := vses(st); !slices.Equal(got, tc.want) {
		t.Errorf("virtual servers:\n got:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
	}
	if got := binds(st); !slices.Equal(got, tc.bind) {
		t.Errorf("bind = %v, want %v", got, tc.bind)
	}
	if got := reasons(st); !slices.Equal(got, tc.problems) {
		t.Errorf("problems = %v, want %v (%v)", got, tc.problems, st.Reasons)
	}
	var all strings.Builder
	for _, p := range st.Reasons {
		all.WriteString(p.Message + "\n")
	}
	for _, m := range tc.msgs {
		if !strings.Contains(all.String(), m) {
			t.Errorf("no problem message contains %q; messages:\n%s", m, all.String())
		}
	}
}

// firstKey returns the smallest VS key of st.
func firstKey(st *model.ServiceState) model.VSKey {
	var best model.VSKey
	first := true
	for k := range st.VSes {
		if first || model.VSKeyLess(k, best) {
			best, first = k, false
		}
	}
	return best
}

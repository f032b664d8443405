package proxy

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/kube-ipvs/kube-ipvs/model"
)

func check(v string) svcOpt { return annotation(AnnotationHealthCheck, v) }

// unhealthy marks endpoints (addr:port) of ns/web as failing their check.
func unhealthy(eps ...string) func(*Config) {
	return func(c *Config) {
		m := map[model.RSKey]bool{}
		for _, e := range eps {
			ap := netip.MustParseAddrPort(e)
			m[model.RSKey{Addr: ap.Addr(), Port: ap.Port()}] = true
		}
		c.Unhealthy = map[model.ServiceName]map[model.RSKey]bool{{Namespace: testNS, Name: testName}: m}
	}
}

func noHealthChecks(c *Config) { c.NoHealthChecks = true }

// weighted renders a virtual server with explicit weights: reals are "addr:port weight".
func weighted(head string, reals ...string) string {
	var b strings.Builder
	b.WriteString(head)
	for _, r := range reals {
		b.WriteString("\n  -> " + r)
	}
	return b.String()
}

func TestBuildServiceHealthCheckWeights(t *testing.T) {
	three := []*discoveryv1.EndpointSlice{v4("a", httpPort, ep("10.1.0.1"), ep("10.1.0.2"), ep("10.1.0.3"))}
	runBuildCases(t, []buildCase{{
		name: "no annotation: verdicts are ignored",
		svc:  service(), slices: three, cfg: config(unhealthy("10.1.0.1:8080")),
		want: []string{vs("TCP 10.0.0.1:80 rr", "10.1.0.1:8080", "10.1.0.2:8080", "10.1.0.3:8080")},
		bind: bindCIP,
	}, {
		name: "no verdicts yet: every endpoint at weight 1",
		svc:  service(check("tcp")), slices: three,
		want: []string{vs("TCP 10.0.0.1:80 rr", "10.1.0.1:8080", "10.1.0.2:8080", "10.1.0.3:8080")},
		bind: bindCIP,
	}, {
		name: "one unhealthy endpoint: weight 0, the others keep 1",
		svc:  service(check("tcp")), slices: three, cfg: config(unhealthy("10.1.0.2:8080")),
		want: []string{weighted("TCP 10.0.0.1:80 rr", "10.1.0.1:8080 weight 1", "10.1.0.2:8080 weight 0", "10.1.0.3:8080 weight 1")},
		bind: bindCIP,
	}, {
		name: "all unhealthy: fail open, all keep weight 1, with a Problem",
		svc:  service(check("http:/healthz")), slices: three,
		cfg:      config(unhealthy("10.1.0.1:8080", "10.1.0.2:8080", "10.1.0.3:8080")),
		want:     []string{vs("TCP 10.0.0.1:80 rr", "10.1.0.1:8080", "10.1.0.2:8080", "10.1.0.3:8080")},
		bind:     bindCIP,
		problems: []string{ReasonHealthCheckFailOpen},
		msgs:     []string{`all 3 endpoints of port "http" (IPv4) fail their health check`},
	}, {
		name: "sh with an endpoint at weight 0: fallback flag set",
		svc:  service(check("tcp"), sched("sh")), slices: three, cfg: config(unhealthy("10.1.0.1:8080")),
		want: []string{weighted("TCP 10.0.0.1:80 sh fallback", "10.1.0.1:8080 weight 0", "10.1.0.2:8080 weight 1", "10.1.0.3:8080 weight 1")},
		bind: bindCIP,
	}, {
		name: "mh with every endpoint healthy: the user's flags only",
		svc:  service(check("tcp"), sched("mh"), flags("mh-port")), slices: three,
		want: []string{vs("TCP 10.0.0.1:80 mh port", "10.1.0.1:8080", "10.1.0.2:8080", "10.1.0.3:8080")},
		bind: bindCIP,
	}, {
		name:   "a terminating endpoint is not a real server (it drains), whatever its verdict",
		svc:    service(check("tcp")),
		slices: []*discoveryv1.EndpointSlice{v4("a", httpPort, ep("10.1.0.1"), ep("10.1.0.2"), ep("10.1.0.3", draining))},
		cfg:    config(unhealthy("10.1.0.3:8080", "10.1.0.1:8080")),
		want:   []string{weighted("TCP 10.0.0.1:80 rr", "10.1.0.1:8080 weight 0", "10.1.0.2:8080 weight 1")},
		bind:   bindCIP,
	}, {
		name:   "UDP ports are not checked",
		svc:    service(check("tcp"), ports(svcPort("dns", v1.ProtocolUDP, 53, 0))),
		slices: []*discoveryv1.EndpointSlice{v4("a", epPorts(sp("dns", v1.ProtocolUDP, 5353)), ep("10.1.0.1"), ep("10.1.0.2"))},
		cfg:    config(unhealthy("10.1.0.1:5353")),
		want:   []string{vs("UDP 10.0.0.1:53 rr", "10.1.0.1:5353", "10.1.0.2:5353")},
		bind:   bindCIP,
	}, {
		name: "iptables fallback mode: no checks, and a Problem saying they need IPVS",
		svc:  service(check("tcp")), slices: three, cfg: config(noHealthChecks, unhealthy("10.1.0.1:8080")),
		want:     []string{vs("TCP 10.0.0.1:80 rr", "10.1.0.1:8080", "10.1.0.2:8080", "10.1.0.3:8080")},
		bind:     bindCIP,
		problems: []string{ReasonHealthCheckIgnored},
		msgs:     []string{"health checks need IPVS mode"},
	}})
}

func TestBuildServiceHealthCheckAnnotations(t *testing.T) {
	slc := []*discoveryv1.EndpointSlice{v4("a", httpPort, ep("10.1.0.1"), ep("10.1.0.2"))}
	def := model.HealthCheck{Kind: model.CheckTCP, Interval: 5 * time.Second, Timeout: time.Second,
		HealthyThreshold: 2, UnhealthyThreshold: 3, Targets: []model.RSKey{rsKey("10.1.0.1:8080"), rsKey("10.1.0.2:8080")}}
	with := func(f func(*model.HealthCheck)) *model.HealthCheck { h := def; f(&h); return &h }
	cases := []struct {
		name     string
		opts     []svcOpt
		want     *model.HealthCheck
		problems []string
	}{
		{"absent", nil, nil, nil},
		{"blank", []svcOpt{check(" ")}, nil, nil},
		{"tcp with defaults", []svcOpt{check(" TCP ")}, &def, nil},
		{"http with a path", []svcOpt{check("http:/healthz?x=1")}, with(func(h *model.HealthCheck) { h.Kind, h.Path = model.CheckHTTP, "/healthz?x=1" }), nil},
		{"every parameter", []svcOpt{check("tcp"), annotation(AnnotationHealthCheckInterval, "2s"), annotation(AnnotationHealthCheckTimeout, "300ms"),
			annotation(AnnotationHealthCheckHealthyThreshold, "1"), annotation(AnnotationHealthCheckUnhealthyThreshold, "5")},
			with(func(h *model.HealthCheck) {
				h.Interval, h.Timeout, h.HealthyThreshold, h.UnhealthyThreshold = 2*time.Second, 300*time.Millisecond, 1, 5
			}), nil},
		{"unknown kind: no check", []svcOpt{check("icmp")}, nil, []string{ReasonInvalidHealthCheck}},
		{"http without a path: no check", []svcOpt{check("http:")}, nil, []string{ReasonInvalidHealthCheck}},
		{"http path with a space: no check", []svcOpt{check("http:/a b")}, nil, []string{ReasonInvalidHealthCheck}},
		{"bad interval: default", []svcOpt{check("tcp"), annotation(AnnotationHealthCheckInterval, "10ms")}, &def, []string{ReasonInvalidHealthCheck}},
		{"timeout above interval: default", []svcOpt{check("tcp"), annotation(AnnotationHealthCheckInterval, "2s"), annotation(AnnotationHealthCheckTimeout, "3s")},
			with(func(h *model.HealthCheck) { h.Interval = 2 * time.Second }), []string{ReasonInvalidHealthCheck}},
		{"bad thresholds: defaults", []svcOpt{check("tcp"), annotation(AnnotationHealthCheckHealthyThreshold, "0"),
			annotation(AnnotationHealthCheckUnhealthyThreshold, "three")}, &def, []string{ReasonInvalidHealthCheck, ReasonInvalidHealthCheck}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := BuildService(service(tc.opts...), slc, config())
			if !st.HealthCheck.Equal(tc.want) {
				t.Errorf("HealthCheck = %+v, want %+v", st.HealthCheck, tc.want)
			}
			if got := reasons(st); !slices.Equal(got, tc.problems) {
				t.Errorf("problems = %v, want %v (%v)", got, tc.problems, st.Reasons)
			}
		})
	}
}

func rsKey(s string) model.RSKey {
	ap := netip.MustParseAddrPort(s)
	return model.RSKey{Addr: ap.Addr(), Port: ap.Port()}
}

// TestBuildServiceHealthCheckLocalPolicy: fail open is decided per set of real servers, so a
// Local virtual server whose only local endpoint fails keeps it while the cluster-wide one
// takes it out (as does the in-cluster firewall-mark one, which has every endpoint).
func TestBuildServiceHealthCheckLocalPolicy(t *testing.T) {
	svc := service(check("tcp"), etpLocal, ports(tcp("http", 80, 30080)))
	slc := []*discoveryv1.EndpointSlice{v4("a", httpPort, ep("10.1.0.1", local), ep("10.1.0.2"))}
	st := BuildService(svc, slc, config(nodeIPs("192.168.0.10"), unhealthy("10.1.0.1:8080")))
	want := []string{
		weighted(fmt.Sprintf("FWM %#x IPv4 rr", model.InClusterMark(30080, model.TCP, -1)), "10.1.0.1:8080 weight 0", "10.1.0.2:8080 weight 1"),
		weighted("TCP 10.0.0.1:80 rr", "10.1.0.1:8080 weight 0", "10.1.0.2:8080 weight 1"),
		vs("TCP 192.168.0.10:30080 rr", "10.1.0.1:8080"),
	}
	if got := vses(st); !slices.Equal(got, want) {
		t.Errorf("virtual servers:\n got:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if got := reasons(st); !slices.Equal(got, []string{ReasonHealthCheckFailOpen}) {
		t.Errorf("problems = %v", st.Reasons)
	}
}

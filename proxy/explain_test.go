package proxy

import (
	"fmt"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/kube-ipvs/kube-ipvs/model"
)

// choices renders a state's endpoint choices as "port local addr pod chosen|why" lines.
func choices(st *model.ServiceState) []string {
	var out []string
	for _, c := range st.EndpointChoices() {
		what := "chosen"
		if !c.Chosen {
			what = "out: " + c.Why
		} else if c.Why != "" {
			what = "chosen: " + c.Why
		}
		out = append(out, fmt.Sprintf("%s local=%v %s pod=%s %s", c.PortName, c.Local, c.RS, c.Pod, what))
	}
	return out
}

func pod(name string) epOpt {
	return func(e *discoveryv1.Endpoint) { e.TargetRef = &v1.ObjectReference{Kind: "Pod", Name: name} }
}

func TestEndpointChoicesSayWhy(t *testing.T) {
	cases := []struct {
		name string
		svc  *v1.Service
		eps  []discoveryv1.Endpoint
		cfg  *Config
		want []string
	}{{
		name: "not ready, terminating, spare terminating",
		svc:  service(),
		eps: []discoveryv1.Endpoint{ep("10.1.0.1", pod("a")), ep("10.1.0.2", ready(false), pod("b")),
			ep("10.1.0.3", draining, pod("c")), ep("10.1.0.4", ready(false), serving(false), terminating(true))},
		cfg: config(),
		want: []string{
			"http local=false 10.1.0.1:8080 pod=a chosen",
			"http local=false 10.1.0.2:8080 pod=b out: " + model.WhyNotReady,
			"http local=false 10.1.0.3:8080 pod=c out: " + model.WhyTerminatingSpare,
			"http local=false 10.1.0.4:8080 pod= out: " + model.WhyTerminating,
		},
	}, {
		name: "only terminating ones left: fallback",
		svc:  service(),
		eps:  []discoveryv1.Endpoint{ep("10.1.0.3", draining, pod("c"))},
		cfg:  config(),
		want: []string{"http local=false 10.1.0.3:8080 pod=c chosen: " + model.WhyFallback},
	}, {
		name: "internal traffic policy Local",
		svc:  service(itpLocal),
		eps:  []discoveryv1.Endpoint{ep("10.1.0.1", local), ep("10.1.0.2")},
		cfg:  config(),
		want: []string{
			"http local=true 10.1.0.1:8080 pod= chosen",
			"http local=true 10.1.0.2:8080 pod= out: " + model.WhyOtherNode,
		},
	}, {
		name: "topology hints by zone and by node",
		svc:  service(),
		eps:  []discoveryv1.Endpoint{ep("10.1.0.1", zones("z1")), ep("10.1.0.2", zones("z2"))},
		cfg:  config(zone("z1")),
		want: []string{
			"http local=false 10.1.0.1:8080 pod= chosen",
			"http local=false 10.1.0.2:8080 pod= out: " + model.WhyTopologyZone,
		},
	}, {
		name: "node hints",
		svc:  service(),
		eps:  []discoveryv1.Endpoint{ep("10.1.0.1", nodes(thisNode)), ep("10.1.0.2", nodes("node-b"))},
		cfg:  config(),
		want: []string{
			"http local=false 10.1.0.1:8080 pod= chosen",
			"http local=false 10.1.0.2:8080 pod= out: " + model.WhyTopologyNode,
		},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := BuildService(tc.svc, []*discoveryv1.EndpointSlice{v4("s1", httpPort, tc.eps...)}, tc.cfg)
			if got := choices(st); !slices.Equal(got, tc.want) {
				t.Errorf("choices:\n got %q\nwant %q", got, tc.want)
			}
			checkChoicesAgree(t, st)
		})
	}
}

// checkChoicesAgree checks that every real server has a chosen EndpointChoice of its port
// and that every chosen one is a real server of a virtual server of its port and family:
// explain must never tell a different story from the kernel's.
func checkChoicesAgree(t *testing.T, st *model.ServiceState) {
	t.Helper()
	chosen := map[string]bool{}
	for _, c := range st.EndpointChoices() {
		if c.Chosen {
			chosen[c.PortName+" "+c.RS.String()] = true
		}
	}
	real := map[string]bool{}
	for _, vs := range st.VSes {
		for rs := range vs.Reals {
			real[vs.PortName+" "+rs.String()] = true
			if !chosen[vs.PortName+" "+rs.String()] {
				t.Errorf("%s real server %s has no chosen EndpointChoice", vs.Key, rs)
			}
		}
	}
	for k := range chosen {
		if !real[k] {
			t.Errorf("chosen %s is no real server", k)
		}
	}
}

// TestNodePortChoicesFollowExternalPolicy: a Service with externalTrafficPolicy Local
// records both choices, the cluster one for its ClusterIP and the local one for its
// NodePort, each agreeing with its virtual servers.
func TestNodePortChoicesFollowExternalPolicy(t *testing.T) {
	svc := service(svcType(v1.ServiceTypeNodePort), ports(tcp("http", 80, 30080)), etpLocal)
	st := BuildService(svc, []*discoveryv1.EndpointSlice{v4("s1", httpPort, ep("10.1.0.1", local), ep("10.1.0.2"))},
		config(nodeIPs("192.168.0.10")))
	want := []string{
		"http local=false 10.1.0.1:8080 pod= chosen",
		"http local=false 10.1.0.2:8080 pod= chosen",
		"http local=true 10.1.0.1:8080 pod= chosen",
		"http local=true 10.1.0.2:8080 pod= out: " + model.WhyOtherNode,
	}
	if got := choices(st); !slices.Equal(got, want) {
		t.Errorf("choices:\n got %q\nwant %q", got, want)
	}
}

// The choices are worked out again when asked, without the health-check verdicts: an
// endpoint the checker holds at weight 0 is still a chosen real server, as it was when the
// state was built.
func TestEndpointChoicesOfACheckedService(t *testing.T) {
	sl := []*discoveryv1.EndpointSlice{v4("a", httpPort, ep("10.1.0.1", pod("a")), ep("10.1.0.2", pod("b")))}
	st := BuildService(service(check("tcp")), sl, config(unhealthy("10.1.0.2:8080")))
	want := []string{"http local=false 10.1.0.1:8080 pod=a chosen", "http local=false 10.1.0.2:8080 pod=b chosen"}
	if got := choices(st); !slices.Equal(got, want) {
		t.Errorf("choices %q, want %q", got, want)
	}
	checkChoicesAgree(t, st)
}

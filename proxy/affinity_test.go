package proxy

import (
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/kube-ipvs/kube-ipvs/model"
)

func TestBuildServiceAffinity(t *testing.T) {
	runBuildCases(t, []buildCase{{
		name: "None: not persistent",
		svc:  service(func(s *v1.Service) { s.Spec.SessionAffinity = v1.ServiceAffinityNone }),
		want: []string{vs("TCP 10.0.0.1:80 rr")}, bind: bindCIP,
	}, {
		name: "ClientIP without config: default timeout",
		svc:  service(clientIP(nil)),
		want: []string{vs("TCP 10.0.0.1:80 rr persistent 10800")}, bind: bindCIP,
	}, {
		name: "ClientIP with empty clientIP config: default timeout",
		svc: service(clientIP(nil), func(s *v1.Service) {
			s.Spec.SessionAffinityConfig = &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{}}
		}),
		want: []string{vs("TCP 10.0.0.1:80 rr persistent 10800")}, bind: bindCIP,
	}, {
		name: "ClientIP custom timeout",
		svc:  service(clientIP(ptr(int32(600)))),
		want: []string{vs("TCP 10.0.0.1:80 rr persistent 600")}, bind: bindCIP,
	}, {
		name: "ClientIP bounds 1 and 86400",
		svc:  service(clientIP(ptr(int32(1)))),
		want: []string{vs("TCP 10.0.0.1:80 rr persistent 1")}, bind: bindCIP,
	}, {
		name: "ClientIP upper bound",
		svc:  service(clientIP(ptr(int32(86400)))),
		want: []string{vs("TCP 10.0.0.1:80 rr persistent 86400")}, bind: bindCIP,
	}, {
		name: "ClientIP timeout 0: default and problem",
		svc:  service(clientIP(ptr(int32(0)))),
		want: []string{vs("TCP 10.0.0.1:80 rr persistent 10800")}, bind: bindCIP,
		problems: []string{"InvalidSessionAffinityTimeout"},
		msgs:     []string{"spec.sessionAffinityConfig.clientIP.timeoutSeconds 0 is outside 1..86400; using 10800"},
	}, {
		name: "ClientIP timeout too large: default and problem",
		svc:  service(clientIP(ptr(int32(86401)))),
		want: []string{vs("TCP 10.0.0.1:80 rr persistent 10800")}, bind: bindCIP,
		problems: []string{"InvalidSessionAffinityTimeout"},
		msgs:     []string{"timeoutSeconds 86401 is outside"},
	}, {
		name: "ClientIP negative timeout",
		svc:  service(clientIP(ptr(int32(-5)))),
		want: []string{vs("TCP 10.0.0.1:80 rr persistent 10800")}, bind: bindCIP,
		problems: []string{"InvalidSessionAffinityTimeout"},
		msgs:     []string{"timeoutSeconds -5 is outside"},
	}, {
		name: "ClientIP with UDP port",
		svc:  service(clientIP(ptr(int32(30))), ports(svcPort("dns", v1.ProtocolUDP, 53, 0))),
		want: []string{vs("UDP 10.0.0.1:53 rr persistent 30")}, bind: bindCIP,
	}})
}

// TestBuildServiceSpecBits checks the raw spec values, not just the rendering: only the
// managed flag bits are set and Timeout is 0 without persistence.
func TestBuildServiceSpecBits(t *testing.T) {
	cases := []struct {
		name string
		svc  *v1.Service
		want model.VSSpec
	}{
		{"plain", service(), model.VSSpec{Scheduler: "rr"}},
		{"sh fallback+port", service(sched("sh"), flags("sh-fallback,sh-port")),
			model.VSSpec{Scheduler: "sh", Flags: model.FlagSchedFallbk | model.FlagSchedPort}},
		{"mh port persistent", service(sched("mh"), flags("mh-port"), clientIP(ptr(int32(60)))),
			model.VSSpec{Scheduler: "mh", Flags: model.FlagSchedPort | model.FlagPersistent, Timeout: 60}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := BuildService(tc.svc, nil, config())
			if len(st.VSes) != 1 {
				t.Fatalf("got %d VSes", len(st.VSes))
			}
			for _, v := range st.VSes {
				if v.Spec != tc.want {
					t.Errorf("spec = %+v, want %+v", v.Spec, tc.want)
				}
				if v.Spec.Flags&^model.FlagsWeManage != 0 {
					t.Errorf("flags %#x outside FlagsWeManage", v.Spec.Flags)
				}
			}
		})
	}
}

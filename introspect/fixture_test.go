package introspect

import (
	"net/netip"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-ipvs/kube-ipvs/firewall"
	"github.com/kube-ipvs/kube-ipvs/ipvs"
	"github.com/kube-ipvs/kube-ipvs/model"
	"github.com/kube-ipvs/kube-ipvs/proxy"
)

// The fixture: Service demo/web (ClusterIP 10.96.0.10, NodePort 30080 on node IP
// 192.168.1.2, a rejected scheduler annotation) with a ready pod web-1 on this node, a
// not-ready web-2, and a removed endpoint 10.244.0.9 still draining on the ClusterIP.

var fixtureNow = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func ptr[T any](v T) *T { return &v }

func fixtureStates(t *testing.T) []*model.ServiceState {
	t.Helper()
	svc := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "web", Annotations: map[string]string{proxy.AnnotationScheduler: "fastest"}},
		Spec: v1.ServiceSpec{Type: v1.ServiceTypeNodePort, ClusterIP: "10.96.0.10", ClusterIPs: []string{"10.96.0.10"},
			Ports: []v1.ServicePort{{Name: "http", Protocol: v1.ProtocolTCP, Port: 80, NodePort: 30080}}},
	}
	ep := func(addr, pod string, ready bool) discoveryv1.Endpoint {
		return discoveryv1.Endpoint{Addresses: []string{addr}, NodeName: ptr("node-a"),
			Conditions: discoveryv1.EndpointConditions{Ready: ptr(ready)},
			TargetRef:  &v1.ObjectReference{Kind: "Pod", Namespace: "demo", Name: pod}}
	}
	sl := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "demo", Name: "web-1", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr("http"), Protocol: ptr(v1.ProtocolTCP), Port: ptr(int32(8080))}},
		Endpoints:   []discoveryv1.Endpoint{ep("10.244.0.11", "web-1", true), ep("10.244.0.12", "web-2", false)},
	}
	cfg := &proxy.Config{DefaultScheduler: "rr", NodeName: "node-a", NodeIPs: []netip.Addr{netip.MustParseAddr("192.168.1.2")}}
	st := proxy.BuildService(svc, []*discoveryv1.EndpointSlice{sl}, cfg)
	if st == nil || len(st.VSes) != 2 {
		t.Fatalf("fixture: want 2 virtual servers, got %v", st)
	}
	return []*model.ServiceState{st}
}

func key(s string, port uint16) model.VSKey {
	return model.VSKey{Addr: netip.MustParseAddr(s), Proto: model.TCP, Port: port}
}

func rs(s string, port uint16) model.RSKey {
	return model.RSKey{Addr: netip.MustParseAddr(s), Port: port}
}

func fixtureDoc(t *testing.T) Document {
	return Build(Input{Node: "node-a", Mode: "ipvs", Services: fixtureStates(t), Now: fixtureNow,
		Ownership: Ownership{DummyInterface: "kube-ipvs0", NodePortMin: 30000, NodePortMax: 32767},
		Draining:  map[model.VSKey]map[model.RSKey]time.Time{key("10.96.0.10", 80): {rs("10.244.0.9", 8080): fixtureNow.Add(25 * time.Second)}},
		Firewall:  &firewall.Config{IPv4: true}})
}

// fixtureKernel is the kernel's table with drift: the NodePort virtual server lost its
// real server and has a stray one, a foreign virtual server, and an owned one that no
// Service wants.
func fixtureKernel() []ipvs.TableVS {
	real := func(addr string, w, act, inact uint32) ipvs.TableReal {
		return ipvs.TableReal{RS: rs(addr, 8080), Weight: w, Forward: "Masq", ActiveConns: act, InactiveConns: inact,
			Stats: ipvs.Counters{Conns: uint64(act + inact), PacketsIn: 10, PacketsOut: 8, BytesIn: 600, BytesOut: 900}}
	}
	return []ipvs.TableVS{
		{Key: key("10.96.0.10", 80), Scheduler: "rr", Flags: model.FlagHashed, Stats: ipvs.Counters{Conns: 3, PacketsIn: 20, PacketsOut: 16, BytesIn: 1200, BytesOut: 1800, CPS: 1},
			Reals: []ipvs.TableReal{real("10.244.0.9", 0, 1, 0), real("10.244.0.11", 1, 1, 1)}},
		{Key: key("10.96.0.99", 80), Scheduler: "rr", Reals: []ipvs.TableReal{real("10.244.0.50", 1, 0, 0)}},
		{Key: key("172.16.0.1", 80), Scheduler: "wlc", Reals: []ipvs.TableReal{real("172.16.0.5", 3, 0, 0)}},
		{Key: key("192.168.1.2", 30080), Scheduler: "rr", Reals: []ipvs.TableReal{real("10.244.0.77", 1, 0, 0)}},
	}
}

// fixtureOwns: 10.96.0.99 is on kube-ipvs0; 172.16.0.1 is someone else's.
func fixtureOwns(k model.VSKey) bool {
	return k.Addr == netip.MustParseAddr("10.96.0.99") || k.Addr == netip.MustParseAddr("10.96.0.10") ||
		(k.Addr == netip.MustParseAddr("192.168.1.2") && k.Port >= 30000)
}

package ipvsmode

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"

	"github.com/kube-ipvs/kube-ipvs/controller"
	"github.com/kube-ipvs/kube-ipvs/dataplane"
	"github.com/kube-ipvs/kube-ipvs/dummyif"
	"github.com/kube-ipvs/kube-ipvs/firewall"
	"github.com/kube-ipvs/kube-ipvs/ipset"
	"github.com/kube-ipvs/kube-ipvs/iptables"
	"github.com/kube-ipvs/kube-ipvs/ipvs"
	"github.com/kube-ipvs/kube-ipvs/model"
)

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

// fakeDataplane is the IPVS mode over fake kernels, IPv4 only, NodePorts 30000-32767.
func fakeDataplane(ipvsK *ipvs.FakeKernel, nl *dummyif.FakeNetlink, setsK *ipset.FakeKernel, fx *iptables.FakeExec) *Dataplane {
	return NewWith(Config{Firewall: firewall.Config{IPv4: true}, NodePortMin: 30000, NodePortMax: 32767}, Parts{
		IPVS:      NewIPVS(ipvsK, 0),
		Addresses: dummyif.NewWithNetlink("kube-ipvs0", nl),
		Sets:      ipset.New(setsK),
		Rules:     iptables.New(fx, iptables.Config{Backend: iptables.Backend("nft")}),
	}, discard)
}

func svc(i int) (*corev1.Service, *discoveryv1.EndpointSlice) {
	name := fmt.Sprintf("s%d", i)
	ip := fmt.Sprintf("10.96.0.%d", i+1)
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: ip, ClusterIPs: []string{ip},
			Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}}},
	}
	sl := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "ns", Name: name + "-1", Labels: map[string]string{discoveryv1.LabelServiceName: name}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To[int32](8080)}},
	}
	for j := range 3 {
		sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{Addresses: []string{fmt.Sprintf("10.244.%d.%d", i, j+1)},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
	}
	return s, sl
}

// The production wiring (the IPVS mode over its reconcilers) on fake kernels, through the
// controller: a full sync programs everything, a second one and a no-op change write
// nothing, an endpoint change writes one real server and one hairpin entry.
func TestWiringThroughTheController(t *testing.T) {
	client := fake.NewClientset()
	for i := range 20 {
		s, sl := svc(i)
		_ = client.Tracker().Add(s)
		_ = client.Tracker().Add(sl)
	}
	ipvsK := ipvs.NewFakeKernel()
	nl := dummyif.NewFakeNetlink()
	setsK := ipset.NewFakeKernel()
	fx := iptables.NewFakeExec()
	dp := fakeDataplane(ipvsK, nl, setsK, fx)
	ctl := runController(t, client, dp, []netip.Addr{netip.MustParseAddr("192.168.1.10")}, nil)

	wait := func(what string, cond func(controller.Stats) bool) controller.Stats {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			if st := ctl.Stats(); cond(st) {
				return st
			}
			time.Sleep(2 * time.Millisecond)
		}
		t.Fatalf("%s: last stats %+v", what, ctl.Stats())
		return controller.Stats{}
	}
	st := wait("full sync", func(s controller.Stats) bool { return s.TotalSyncs >= 1 })
	if st.IPVSWrites != 20*4 || st.AddrWrites != 20 || st.Errors != 0 {
		t.Fatalf("first sync: %+v (want 80 IPVS writes, 20 address writes)", st)
	}
	if _, entries, ok := setsK.Get(firewall.SetLoopBack); !ok || len(entries) != 60 {
		t.Fatalf("hairpin set: %d entries, want 60", len(entries))
	}

	// No change: a Service touched, nothing written.
	s, sl := svc(3)
	s.Annotations = map[string]string{"touched": "yes"}
	syncs := st.TotalSyncs
	if err := client.Tracker().Update(corev1.SchemeGroupVersion.WithResource("services"), s, "ns"); err != nil {
		t.Fatal(err)
	}
	st = wait("no-op sync", func(s controller.Stats) bool { return s.TotalSyncs > syncs })
	if st.IPVSWrites+st.AddrWrites+st.SetWrites+st.Restores != 0 {
		t.Fatalf("a no-op sync wrote: %+v", st)
	}

	// One endpoint more: one real server, one hairpin entry.
	sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{Addresses: []string{"10.244.3.9"},
		Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
	syncs = st.TotalSyncs
	if err := client.Tracker().Update(discoveryv1.SchemeGroupVersion.WithResource("endpointslices"), sl, "ns"); err != nil {
		t.Fatal(err)
	}
	st = wait("endpoint sync", func(s controller.Stats) bool { return s.TotalSyncs > syncs })
	if st.IPVSWrites != 1 || st.SetWrites != 1 || st.AddrWrites != 0 || st.Restores != 0 {
		t.Fatalf("an endpoint change: %+v, want 1 IPVS and 1 ipset write", st)
	}
	vs, err := ipvs.ReadVirtualServer(ipvsK, model.VSKey{Addr: netip.MustParseAddr("10.96.0.4"), Proto: model.TCP, Port: 80})
	if err != nil || len(vs.Reals) != 4 {
		t.Fatalf("virtual server after the change: %v %v", vs, err)
	}
}

// Two LoadBalancer Services on one LB IP and port: the one that loses the virtual server
// writes nothing for it (its source ranges must not widen the winner's filter), is told by
// a Warning Event naming the winner, and takes over cleanly when the winner goes away.
func TestConflictLoserWritesNothing(t *testing.T) {
	lbSvc := func(ns, cidr string) *corev1.Service {
		return &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "lb"},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, ClusterIP: "10.96.1." + map[string]string{"a": "1", "b": "2"}[ns],
				Ports:                    []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}},
				LoadBalancerSourceRanges: []string{cidr}},
			Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: "203.0.113.7"}}}},
		}
	}
	client := fake.NewClientset(lbSvc("a", "192.0.2.0/24"), lbSvc("b", "0.0.0.0/1"))
	setsK := ipset.NewFakeKernel()
	dp := fakeDataplane(ipvs.NewFakeKernel(), dummyif.NewFakeNetlink(), setsK, iptables.NewFakeExec())
	recorder := record.NewFakeRecorder(100)
	runController(t, client, dp, nil, recorder)

	ranges := func() []string {
		_, entries, _ := setsK.Get(firewall.SetLBSourceCIDR)
		var out []string
		for _, e := range entries {
			out = append(out, e)
		}
		slices.Sort(out)
		return out
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
			if cond() {
				return
			}
		}
		t.Fatalf("%s: source CIDR set %v", what, ranges())
	}
	waitFor("winner's range only", func() bool {
		return slices.Equal(ranges(), []string{"203.0.113.7,tcp:80,192.0.2.0/24"})
	})
	var events []string
	for len(recorder.Events) > 0 {
		events = append(events, <-recorder.Events)
	}
	found := false
	for _, e := range events {
		if strings.Contains(e, "VirtualServerConflict") && strings.Contains(e, "TCP 203.0.113.7:80") && strings.Contains(e, "Service a/lb") {
			found = true
		}
	}
	if !found {
		t.Errorf("no Warning Event on b/lb naming the winner a/lb; events: %q", events)
	}

	// The winner goes: the loser takes over, with its own range only.
	if err := client.Tracker().Delete(corev1.SchemeGroupVersion.WithResource("services"), "a", "lb"); err != nil {
		t.Fatal(err)
	}
	waitFor("the loser takes over", func() bool {
		return slices.Equal(ranges(), []string{"203.0.113.7,tcp:80,0.0.0.0/1"})
	})
}

// An externalIP that is the node's own address keeps its virtual server, but is neither
// bound to kube-ipvs0 nor put into the VIP filter, and does not stop the node address from
// carrying NodePorts; a link-local one (the pods' gateway) gets nothing at all.
func TestNodeAddressIsNeverTaken(t *testing.T) {
	node := netip.MustParseAddr("192.168.1.10")
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "evil"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, ClusterIP: "10.96.0.9", ExternalIPs: []string{"192.168.1.10", "169.254.1.1"},
			Ports: []corev1.ServicePort{{Name: "ssh", Protocol: corev1.ProtocolTCP, Port: 22, NodePort: 30022}}},
	}
	other, _ := svc(1)
	other.Spec.Type = corev1.ServiceTypeNodePort
	other.Spec.Ports[0].NodePort = 30080
	client := fake.NewClientset(s, other)
	ipvsK, nl, setsK := ipvs.NewFakeKernel(), dummyif.NewFakeNetlink(), ipset.NewFakeKernel()
	dp := fakeDataplane(ipvsK, nl, setsK, iptables.NewFakeExec())
	recorder := record.NewFakeRecorder(100)
	cfg := controller.Config{NodeName: "node-a", DefaultScheduler: "rr", SyncPeriod: time.Hour}
	ctl, err := controller.New(cfg, client, dp,
		func() ([]netip.Addr, error) { return []netip.Addr{node, netip.MustParseAddr("169.254.1.1")}, nil }, recorder,
		controller.Observers{}, discard)
	if err != nil {
		t.Fatal(err)
	}
	if err := ctl.SyncOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, k := range []model.VSKey{{Addr: node, Proto: model.TCP, Port: 22}, {Addr: node, Proto: model.TCP, Port: 30022}, {Addr: node, Proto: model.TCP, Port: 30080}} {
		if _, err := ipvs.ReadVirtualServer(ipvsK, k); err != nil {
			t.Errorf("virtual server %s missing: %v", k, err)
		}
	}
	if _, err := ipvs.ReadVirtualServer(ipvsK, model.VSKey{Addr: netip.MustParseAddr("169.254.1.1"), Proto: model.TCP, Port: 22}); err == nil {
		t.Error("a virtual server on the link-local 169.254.1.1")
	}
	if got := nl.Addrs("kube-ipvs0"); !slices.ContainsFunc(got, func(a string) bool { return strings.HasPrefix(a, "10.96.0.9/") }) {
		t.Errorf("kube-ipvs0 lacks the ClusterIP: %v", got)
	}
	if got := nl.Addrs("kube-ipvs0"); slices.ContainsFunc(got, func(a string) bool { return strings.HasPrefix(a, "192.168.1.10/") || strings.HasPrefix(a, "169.254.") }) {
		t.Errorf("kube-ipvs0 holds a node address: %v", got)
	}
	_, vips, _ := setsK.Get(firewall.SetVIPs)
	if !slices.Contains(vips, "10.96.0.9") {
		t.Errorf("the VIP filter lacks the ClusterIP: %v", vips)
	}
	if slices.Contains(vips, "192.168.1.10") || slices.Contains(vips, "169.254.1.1") {
		t.Errorf("the VIP filter holds a node address: %v", vips)
	}
	var events []string
	for len(recorder.Events) > 0 {
		events = append(events, <-recorder.Events)
	}
	joined := strings.Join(events, "\n")
	if !strings.Contains(joined, "ServiceAddressIsNodeAddress") || !strings.Contains(joined, "169.254.1.1") {
		t.Errorf("no Warning Events naming the node address and the refused one: %q", events)
	}
}

// runController runs the production controller over client and dp, with the node's own
// addresses host, until the test ends.
func runController(t *testing.T, client *fake.Clientset, dp *Dataplane, host []netip.Addr, recorder record.EventRecorder) *controller.Controller {
	t.Helper()
	cfg := controller.Config{NodeName: "node-a", DefaultScheduler: "rr", SyncPeriod: time.Hour}
	ctl, err := controller.New(cfg, client, dp, func() ([]netip.Addr, error) { return host, nil }, recorder, controller.Observers{}, discard)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = ctl.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return ctl
}

// An externalTrafficPolicy: Local NodePort whose endpoints are all on other nodes: the node
// port's virtual server stays empty for outside clients, the firewall-mark one has every
// endpoint and its mark is in the in-cluster set; an endpoint more costs the ClusterIP and
// the firewall-mark real server and one hairpin entry (3 writes), a no-op nothing.
func TestLocalPolicyInClusterVirtualServer(t *testing.T) {
	s, sl := svc(0)
	s.Spec.Type, s.Spec.ExternalTrafficPolicy = corev1.ServiceTypeNodePort, corev1.ServiceExternalTrafficPolicyLocal
	s.Spec.Ports[0].NodePort = 30080
	client := fake.NewClientset(s, sl)
	ipvsK := ipvs.NewFakeKernel()
	setsK := ipset.NewFakeKernel()
	ctl := runController(t, client, fakeDataplane(ipvsK, dummyif.NewFakeNetlink(), setsK, iptables.NewFakeExec()),
		[]netip.Addr{netip.MustParseAddr("192.168.1.10")}, nil)
	wait := func(what string, syncs int, cond func(controller.Stats) bool) controller.Stats {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			if st := ctl.Stats(); int(st.TotalSyncs) > syncs && cond(st) {
				return st
			}
			time.Sleep(2 * time.Millisecond)
		}
		t.Fatalf("%s: last stats %+v", what, ctl.Stats())
		return controller.Stats{}
	}
	st := wait("full sync", 0, func(controller.Stats) bool { return true })
	mark := model.InClusterMark(30080, model.TCP, -1)
	fwm := model.FWMarkKey(mark, false)
	np := model.VSKey{Addr: netip.MustParseAddr("192.168.1.10"), Proto: model.TCP, Port: 30080}
	if vs, err := ipvs.ReadVirtualServer(ipvsK, fwm); err != nil || len(vs.Reals) != 3 {
		t.Fatalf("firewall-mark virtual server: %v %v, want the 3 (remote) endpoints", vs, err)
	}
	if vs, err := ipvs.ReadVirtualServer(ipvsK, np); err != nil || len(vs.Reals) != 0 {
		t.Fatalf("node port virtual server: %v %v, want no real server (no local endpoint)", vs, err)
	}
	wantEntry := fmt.Sprintf("192.168.1.10,tcp:30080 skbmark %#x", mark)
	if _, entries, ok := setsK.Get(firewall.SetInClusterLocal); !ok || !slices.Equal(entries, []string{wantEntry}) {
		t.Fatalf("in-cluster set: %v, want [%s]", entries, wantEntry)
	}

	sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{Addresses: []string{"10.244.3.9"},
		Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
	if err := client.Tracker().Update(discoveryv1.SchemeGroupVersion.WithResource("endpointslices"), sl, "ns"); err != nil {
		t.Fatal(err)
	}
	st = wait("endpoint sync", int(st.TotalSyncs), func(controller.Stats) bool { return true })
	if st.IPVSWrites != 2 || st.SetWrites != 1 || st.AddrWrites != 0 || st.Restores != 0 {
		t.Fatalf("an endpoint change: %+v, want 2 IPVS writes (ClusterIP, firewall mark) and 1 ipset write", st)
	}
	if vs, err := ipvs.ReadVirtualServer(ipvsK, fwm); err != nil || len(vs.Reals) != 4 {
		t.Fatalf("firewall-mark virtual server after the change: %v %v", vs, err)
	}
	s.Annotations = map[string]string{"touched": "yes"}
	if err := client.Tracker().Update(corev1.SchemeGroupVersion.WithResource("services"), s, "ns"); err != nil {
		t.Fatal(err)
	}
	st = wait("no-op sync", int(st.TotalSyncs), func(controller.Stats) bool { return true })
	if st.IPVSWrites+st.AddrWrites+st.SetWrites+st.Restores != 0 {
		t.Fatalf("a no-op sync wrote: %+v", st)
	}
}

// Apply says how long each part of the kernel took: a slow change can then be placed.
func TestApplyTimesEachPart(t *testing.T) {
	dp := fakeDataplane(ipvs.NewFakeKernel(), dummyif.NewFakeNetlink(), ipset.NewFakeKernel(), iptables.NewFakeExec())
	key := model.VSKey{Proto: model.TCP, Addr: netip.MustParseAddr("10.96.0.1"), Port: 80}
	if res := dp.ensureLink(); res.Err != nil {
		t.Fatal(res.Err)
	}
	start := time.Now()
	res := dp.Apply(dataplane.Change{
		VSes: map[model.VSKey]*model.VirtualServer{key: {Key: key, Spec: model.VSSpec{Scheduler: "rr"}}},
		Bind: []netip.Addr{key.Addr},
	})
	took := time.Since(start)
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	p := res.Phases
	if p.IPVS <= 0 || p.Addresses <= 0 || p.Firewall <= 0 {
		t.Fatalf("phases %+v: every part ran and must have a time", p)
	}
	if sum := p.IPVS + p.Addresses + p.Firewall; sum > took {
		t.Fatalf("phases %+v add up to %v, more than Apply's %v", p, sum, took)
	}
}

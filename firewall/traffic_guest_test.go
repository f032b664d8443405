//go:build guest

package firewall_test

import (
	"errors"
	"net"
	"net/netip"
	"strconv"
	"syscall"
	"testing"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/kube-ipvs/kube-ipvs/firewall"
	"github.com/kube-ipvs/kube-ipvs/ipset"
	"github.com/kube-ipvs/kube-ipvs/iptables"
	"github.com/kube-ipvs/kube-ipvs/model"
	"github.com/kube-ipvs/kube-ipvs/proxy"
	"github.com/kube-ipvs/kube-ipvs/test/guestutil"
	"github.com/kube-ipvs/kube-ipvs/test/netnstest"
)

type asker func(netip.AddrPort) (string, error)

func fromNode(a netip.AddrPort) (string, error) { return guestutil.AskTCP(a) }

// expect checks one request: want is the answer, "refused" or "timeout".
func expect(t *testing.T, who string, ask asker, to string, want string) {
	t.Helper()
	got, err := ask(netip.MustParseAddrPort(to))
	switch {
	case err == nil:
	case errors.Is(err, syscall.ECONNREFUSED):
		got = "refused"
	case isTimeout(err):
		got = "timeout"
	default:
		got = "error: " + err.Error()
	}
	if got != want {
		t.Errorf("%s -> %s: got %q, want %q", who, to, got, want)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// The behaviours the rules and sets exist for, with IPVS, pods and real packets: hairpin,
// masquerade by cluster CIDR, node-originated traffic, the VIP filter (k8s #72236),
// load-balancer source ranges also from the node (k8s #119656), externalTrafficPolicy Local
// keeping the client address, NodePort masquerade, and health-check node ports accepted
// under a DROP input policy.
func TestGuestTrafficBehaviours(t *testing.T) {
	node := netip.MustParseAddr("192.168.1.10")
	guestutil.EnterNode(t, node)
	guestutil.WriteSysctl(t, "net.ipv4.vs.conntrack", "1")
	netnstest.Run(t, "ip", "link", "add", "kube-ipvs0", "type", "dummy")

	a := guestutil.NewPod(t, "a", netip.MustParseAddr("10.244.0.2"))   // the endpoint
	b := guestutil.NewPod(t, "b", netip.MustParseAddr("10.244.0.3"))   // a pod client
	c := guestutil.NewPod(t, "c", netip.MustParseAddr("198.51.100.7")) // outside, allowed
	d := guestutil.NewPod(t, "d", netip.MustParseAddr("192.0.2.9"))    // outside, not allowed
	a.ServeTCPWho(t, 8080, a.Name)
	guestutil.ServeNode(t, "tcp", "0.0.0.0:9999", "node")
	guestutil.ServeNode(t, "tcp", "0.0.0.0:32000", "health")

	cfg := firewall.Config{IPv4: true, ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}, NodeIPs: []netip.Addr{node}}
	pcfg := &proxy.Config{DefaultScheduler: "rr", NodeName: "node-a", NodeIPs: []netip.Addr{node}}
	str := func(s string) *string { return &s }
	port, tcp := int32(8080), v1.ProtocolTCP
	slice := func(svc string) *discoveryv1.EndpointSlice {
		return &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Namespace: "ns", Name: svc + "-1", Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: str("http"), Port: &port, Protocol: &tcp}},
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.244.0.2"}, NodeName: str("node-a")}},
		}
	}
	lbCluster := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web"},
		Spec: v1.ServiceSpec{
			Type: v1.ServiceTypeLoadBalancer, ClusterIP: "10.96.0.10", ClusterIPs: []string{"10.96.0.10"},
			Ports:                    []v1.ServicePort{{Name: "http", Protocol: v1.ProtocolTCP, Port: 80, NodePort: 30080, TargetPort: intstr.FromInt32(8080)}},
			LoadBalancerSourceRanges: []string{"198.51.100.0/24"},
		},
		Status: v1.ServiceStatus{LoadBalancer: v1.LoadBalancerStatus{Ingress: []v1.LoadBalancerIngress{{IP: "203.0.113.10"}}}},
	}
	lbLocal := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "local"},
		Spec: v1.ServiceSpec{
			Type: v1.ServiceTypeLoadBalancer, ClusterIP: "10.96.0.11", ClusterIPs: []string{"10.96.0.11"},
			Ports:                 []v1.ServicePort{{Name: "http", Protocol: v1.ProtocolTCP, Port: 80, NodePort: 30081, TargetPort: intstr.FromInt32(8080)}},
			ExternalTrafficPolicy: v1.ServiceExternalTrafficPolicyLocal, HealthCheckNodePort: 32000,
		},
		Status: v1.ServiceStatus{LoadBalancer: v1.LoadBalancerStatus{Ingress: []v1.LoadBalancerIngress{{IP: "203.0.113.11"}}}},
	}

	// IPVS and kube-ipvs0 from the desired state, as the proxy would program them.
	tracker := firewall.NewTracker()
	for _, svc := range []*v1.Service{lbCluster, lbLocal} {
		st := proxy.BuildService(svc, []*discoveryv1.EndpointSlice{slice(svc.Name)}, pcfg)
		for _, addr := range st.Bind {
			netnstest.Run(t, "ip", "addr", "add", addr.String()+"/32", "dev", "kube-ipvs0")
		}
		for key, vs := range st.VSes {
			which := []string{"-t", netip.AddrPortFrom(key.Addr, key.Port).String()}
			if key.FWMark != 0 {
				which = []string{"-f", strconv.FormatUint(uint64(key.FWMark), 10)}
			}
			netnstest.Run(t, "ipvsadm", append(append([]string{"-A"}, which...), "-s", "rr")...)
			for rs := range vs.Reals {
				netnstest.Run(t, "ipvsadm", append(append([]string{"-a"}, which...), "-r", netip.AddrPortFrom(rs.Addr, rs.Port).String(), "-m")...)
			}
		}
		tracker.UpdateMembers(map[model.ServiceName][]firewall.Member{
			{Namespace: svc.Namespace, Name: svc.Name}: firewall.AppendMembers(nil, st, cfg)}, false)
	}

	// Before any rule: a node process on 0.0.0.0 answers on every VIP (the bug).
	expect(t, "pod b", b.AskTCP, "10.96.0.10:9999", "node")

	k, err := ipset.NewKernel()
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	sets := ipset.New(k)
	if res := sets.ResyncSets(firewall.Sets(cfg), tracker); res.Err != nil || len(res.Errors) > 0 {
		t.Fatalf("ipset Resync: %v %v", res.Err, res.Errors)
	}
	rules := iptables.New(iptables.OSExec{}, iptables.Config{})
	v4, _ := firewall.RenderRules(cfg)
	if res := rules.Apply(v4, ""); res.Err != nil {
		t.Fatalf("iptables Apply: %v", res.Err)
	}
	t.Cleanup(func() { rules.Cleanup() })

	// ClusterIP: pods keep their source; the node and hairpin are masqueraded.
	expect(t, "pod b", b.AskTCP, "10.96.0.10:80", "a 10.244.0.3")
	expect(t, "pod a (hairpin)", a.AskTCP, "10.96.0.10:80", "a 169.254.1.1")
	expect(t, "node", fromNode, "10.96.0.10:80", "a 169.254.1.1")

	// VIP filter: no Service on port 9999 of a VIP, so the node process is not reachable
	// there; it still is on the node's own address.
	expect(t, "pod b", b.AskTCP, "10.96.0.10:9999", "refused")
	expect(t, "node", fromNode, "10.96.0.10:9999", "refused")
	expect(t, "pod b", b.AskTCP, "192.168.1.10:9999", "node")

	// Source ranges: only 198.51.100.0/24 and the Service's own endpoint get through, and
	// the node is filtered like anyone else; Cluster policy masquerades.
	expect(t, "pod c (in range)", c.AskTCP, "203.0.113.10:80", "a 169.254.1.1")
	expect(t, "pod d (out of range)", d.AskTCP, "203.0.113.10:80", "timeout")
	expect(t, "pod b (out of range)", b.AskTCP, "203.0.113.10:80", "timeout")
	expect(t, "pod a (endpoint)", a.AskTCP, "203.0.113.10:80", "a 169.254.1.1")
	expect(t, "node (out of range)", fromNode, "203.0.113.10:80", "timeout")
	// A range that holds the node's address lets the node in.
	lb2 := lbCluster.DeepCopy()
	lb2.Spec.LoadBalancerSourceRanges = append(lb2.Spec.LoadBalancerSourceRanges, "192.168.1.0/24")
	st := proxy.BuildService(lb2, []*discoveryv1.EndpointSlice{slice("web")}, pcfg)
	add, del := tracker.UpdateMembers(map[model.ServiceName][]firewall.Member{
		{Namespace: "ns", Name: "web"}: firewall.AppendMembers(nil, st, cfg)}, true)
	if res := sets.Apply(add); res.Writes != 2 || len(res.Errors) > 0 {
		t.Errorf("adding one range: %+v (want 2 writes: the range and the node's source)", res)
	}
	if res := sets.Apply(del); res.Writes != 0 {
		t.Errorf("adding one range deleted entries: %+v", res)
	}
	expect(t, "node (range holds its IP)", fromNode, "203.0.113.10:80", "a 169.254.1.1")

	// externalTrafficPolicy Local keeps the client address; NodePort Cluster masquerades.
	expect(t, "pod c", c.AskTCP, "203.0.113.11:80", "a 198.51.100.7")
	expect(t, "pod c", c.AskTCP, "192.168.1.10:30080", "a 169.254.1.1")
	expect(t, "pod c", c.AskTCP, "192.168.1.10:30081", "a 198.51.100.7")

	// Under a DROP input policy the health-check node port is still accepted.
	netnstest.Run(t, "iptables", "-P", "INPUT", "DROP")
	defer netnstest.Run(t, "iptables", "-P", "INPUT", "ACCEPT")
	expect(t, "pod c", c.AskTCP, "192.168.1.10:32000", "health")
	expect(t, "pod c", c.AskTCP, "192.168.1.10:9999", "timeout")
}

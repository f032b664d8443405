//go:build guest

package ipvsmode

import (
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/kube-ipvs/kube-ipvs/dataplane"
	"github.com/kube-ipvs/kube-ipvs/firewall"
	"github.com/kube-ipvs/kube-ipvs/model"
	"github.com/kube-ipvs/kube-ipvs/proxy"
	"github.com/kube-ipvs/kube-ipvs/test/guestutil"
	"github.com/kube-ipvs/kube-ipvs/test/netnstest"
)

// A node with the whole IPVS-mode dataplane applied (ipsets, every chain, Services with
// entries in the sets, an externalTrafficPolicy Local load balancer with its in-cluster mark)
// carries traffic that is not kube-ipvs's exactly as it would without it, with real TCP and
// UDP packets:
//   - a masquerading (IPVS NAT) virtual server an operator made with ipvsadm (TCP, UDP, and
//     TCP over IPv6), from a pod in the cluster CIDR and from outside it (IPv4), with
//     net.ipv4.vs.conntrack as the proxy sets it (1) and as the kernel has it before the
//     proxy sets it or after it stopped (0: conntrack does not follow IPVS's connections,
//     so to it the real server's SYN-ACK is INVALID);
//   - a firewall-mark virtual server whose mark (0x2001) has the in-cluster bit but not the
//     proxy's layout: not masqueraded, the real server sees the client;
//   - a forwarded TCP connection whose handshake the node sees only half of (asymmetric
//     routing, k8s #94861): its SYN-ACK is INVALID to conntrack and still forwarded.
//
// The proxy's own Service keeps working, and the INVALID drop still takes its endpoint's
// SYN-ACK when conntrack does not follow IPVS (the drop is scoped, not gone).
func TestGuestForeignTrafficIsNotTouched(t *testing.T) {
	node := netip.MustParseAddr("192.168.1.10")
	guestutil.EnterNode(t, node, netip.MustParseAddr("fd00:168::10")) // IPv6 forwarding on too
	cidr := netip.MustParsePrefix("10.244.0.0/16")
	dp, err := New(Config{Firewall: firewall.Config{ClusterCIDRs: []netip.Prefix{cidr}, NodeIPs: []netip.Addr{node}},
		NodePortMin: 30000, NodePortMax: 32767}, "kube-ipvs0", 0, "", nil, discard)
	if err != nil {
		t.Fatal(err)
	}

	ep := guestutil.NewPod(t, "ep", netip.MustParseAddr("10.244.0.2"))                                         // our endpoint
	pod := guestutil.NewPod(t, "pod", netip.MustParseAddr("10.244.0.3"), netip.MustParseAddr("fd00:244::3"))   // a pod client
	out := guestutil.NewPod(t, "out", netip.MustParseAddr("198.51.100.7"))                                     // a client outside
	rs := guestutil.NewPod(t, "rs", netip.MustParseAddr("10.244.30.1"), netip.MustParseAddr("fd00:244:30::1")) // the foreign real server
	ep.ServeTCPWho(t, 8080, "ep")
	rs.ServeTCPWho(t, 8080, "rs")
	rsUDP := rs.ServeUDP(t, 5353, "rs")

	// Our Services: a ClusterIP and an externalTrafficPolicy Local load balancer (its
	// in-cluster firewall-mark virtual server and KIPVS-IN-CLUSTER-LOCAL entry).
	s := dataplane.Snapshot{Services: map[model.ServiceName]*model.ServiceState{},
		VSes: map[model.VSKey]*model.VirtualServer{}, Binds: map[netip.Addr]bool{}, NodeIPs: []netip.Addr{node}}
	pcfg := &proxy.Config{DefaultScheduler: "rr", NodeName: "node-a", NodeIPs: []netip.Addr{node}}
	str := func(s string) *string { return &s }
	port, tcp := int32(8080), v1.ProtocolTCP
	for _, svc := range []*v1.Service{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web"}, Spec: v1.ServiceSpec{
			ClusterIP: "10.96.0.10", ClusterIPs: []string{"10.96.0.10"},
			Ports: []v1.ServicePort{{Name: "http", Protocol: v1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080)}}}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "local"}, Spec: v1.ServiceSpec{
			Type: v1.ServiceTypeLoadBalancer, ClusterIP: "10.96.0.11", ClusterIPs: []string{"10.96.0.11"},
			Ports:                 []v1.ServicePort{{Name: "http", Protocol: v1.ProtocolTCP, Port: 80, NodePort: 30081, TargetPort: intstr.FromInt32(8080)}},
			ExternalTrafficPolicy: v1.ServiceExternalTrafficPolicyLocal, HealthCheckNodePort: 32000},
			Status: v1.ServiceStatus{LoadBalancer: v1.LoadBalancerStatus{Ingress: []v1.LoadBalancerIngress{{IP: "203.0.113.11"}}}}},
	} {
		slice := &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Namespace: "ns", Name: svc.Name + "-1", Labels: map[string]string{discoveryv1.LabelServiceName: svc.Name}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: str("http"), Port: &port, Protocol: &tcp}},
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.244.0.2"}, NodeName: str("node-a")}},
		}
		st := proxy.BuildService(svc, []*discoveryv1.EndpointSlice{slice}, pcfg)
		s.Services[model.ServiceName{Namespace: svc.Namespace, Name: svc.Name}] = st
		for k, vs := range st.VSes {
			s.VSes[k] = vs
		}
		for _, a := range st.Bind {
			s.Binds[a] = true
		}
	}
	if res := dp.repairWhole(s); res.Failed() != 0 {
		t.Fatalf("repair: %+v", res.Err)
	}
	if out := netnstest.Run(t, "ipvsadm", "-Ln"); !strings.Contains(out, "FWM ") {
		t.Fatalf("no in-cluster firewall-mark virtual server:\n%s", out)
	}

	// The operator's own virtual servers, on an address and with real servers of its own.
	vip := netip.MustParseAddr("10.97.9.1")
	foreignLink(t, "foreign0", vip, netip.MustParseAddr("10.97.9.2"), netip.MustParseAddr("fd00:97:9::1"))
	netnstest.Run(t, "ipvsadm", "-A", "-t", "[fd00:97:9::1]:80", "-s", "rr")
	netnstest.Run(t, "ipvsadm", "-a", "-t", "[fd00:97:9::1]:80", "-r", "[fd00:244:30::1]:8080", "-m")
	netnstest.Run(t, "ipvsadm", "-A", "-t", "10.97.9.1:80", "-s", "rr")
	netnstest.Run(t, "ipvsadm", "-a", "-t", "10.97.9.1:80", "-r", "10.244.30.1:8080", "-m")
	netnstest.Run(t, "ipvsadm", "-A", "-u", "10.97.9.1:53", "-s", "rr")
	netnstest.Run(t, "ipvsadm", "-a", "-u", "10.97.9.1:53", "-r", "10.244.30.1:5353", "-m")
	const fwm = 0x2001
	netnstest.Run(t, "iptables", "-t", "mangle", "-A", "PREROUTING", "-d", "10.97.9.2", "-p", "tcp", "--dport", "80", "-j", "MARK", "--set-mark", strconv.Itoa(fwm))
	netnstest.Run(t, "ipvsadm", "-A", "-f", strconv.Itoa(fwm), "-s", "rr")
	netnstest.Run(t, "ipvsadm", "-a", "-f", strconv.Itoa(fwm), "-r", "10.244.30.1:8080", "-m")

	ask := func(who *guestutil.Pod, to, want string) {
		t.Helper()
		got, err := who.AskTCP(netip.MustParseAddrPort(to))
		if err != nil || got != want {
			t.Errorf("%s -> %s over TCP: %q, %v; want %q", who.Name, to, got, err, want)
		}
	}
	// No subtests: they would run on other threads, outside this test's namespace.
	for _, conntrack := range []string{"1", "0"} {
		t.Logf("net.ipv4.vs.conntrack=%s", conntrack)
		guestutil.WriteSysctl(t, "net.ipv4.vs.conntrack", conntrack)
		before := rsUDP.Served()
		for _, c := range []*guestutil.Pod{pod, out} {
			if conntrack == "1" { // the proxy needs it (it sets it): its own Service
				seen := c.IP(4).String()
				if c == out {
					seen = "169.254.1.1" // from outside the cluster CIDR: masqueraded
				}
				ask(c, "10.96.0.10:80", "ep "+seen)
			}
			ask(c, "10.97.9.1:80", "rs "+c.IP(4).String())
			ask(c, "10.97.9.2:80", "rs "+c.IP(4).String()) // the foreign mark: not masqueraded
			if c == pod {
				ask(c, "[fd00:97:9::1]:80", "rs "+c.IP(6).String())
			}
			if got, err := c.AskUDP(netip.MustParseAddrPort("10.97.9.1:53")); err != nil || got != "rs" {
				t.Errorf("%s -> 10.97.9.1:53 over UDP: %q, %v; want rs", c.Name, got, err)
			}
		}
		if n := rsUDP.Served() - before; n != 2 {
			t.Errorf("the foreign UDP real server answered %d datagrams, want 2", n)
		}
	}
	// The drop still takes what is ours: without vs.conntrack our endpoint's SYN-ACK is
	// INVALID too, and it comes from a real server of ours.
	dropped := invalidDrops(t)
	if _, err := pod.AskTCP(netip.MustParseAddrPort("10.96.0.10:80")); err == nil {
		t.Errorf("with vs.conntrack=0 our own Service answered: the INVALID drop did not take our endpoint's SYN-ACK")
	}
	if n := invalidDrops(t); n <= dropped {
		t.Errorf("the INVALID drop counted %d packets before our endpoint's SYN-ACK and %d after", dropped, n)
	}

	// Non-Kubernetes traffic the node routes, with the proxy's sysctls.
	guestutil.WriteSysctl(t, "net.ipv4.vs.conntrack", "1")
	cli := guestutil.NewPod(t, "acli", netip.MustParseAddr("198.51.100.20"))
	srv := guestutil.NewPod(t, "asrv", netip.MustParseAddr("203.0.113.50"))
	srv.ServeTCP(t, 7070, "asrv")
	shortcut(t, cli, srv)
	if got, err := cli.AskTCP(netip.MustParseAddrPort("203.0.113.50:7070")); err != nil || got != "asrv" {
		t.Errorf("asymmetrically routed TCP: %q, %v; want asrv", got, err)
	}
	if t.Failed() {
		t.Logf("iptables-save -c:\n%s", netnstest.Run(t, "iptables-save", "-c"))
	}
}

// invalidDrops is the packet count of KIPVS-FORWARD's INVALID drop.
func invalidDrops(t *testing.T) int {
	t.Helper()
	for _, line := range strings.Split(netnstest.Run(t, "iptables", "-L", firewall.ChainForward, "-v", "-x", "-n"), "\n") {
		if f := strings.Fields(line); len(f) > 2 && f[2] == "DROP" && strings.Contains(line, "INVALID") {
			n, err := strconv.Atoi(f[0])
			if err != nil {
				t.Fatalf("%q: %v", line, err)
			}
			return n
		}
	}
	t.Fatalf("no INVALID drop in %s", firewall.ChainForward)
	return 0
}

// foreignLink holds addresses of the operator's own on a dummy link kube-ipvs does not own.
func foreignLink(t *testing.T, name string, addrs ...netip.Addr) {
	t.Helper()
	netnstest.Run(t, "ip", "link", "add", name, "type", "dummy")
	for _, a := range addrs {
		if a.Is4() {
			netnstest.Run(t, "ip", "addr", "add", a.String()+"/32", "dev", name)
		} else {
			netnstest.Run(t, "ip", "-6", "addr", "add", a.String()+"/128", "dev", name, "nodad")
		}
	}
}

// shortcut joins two pods directly, so cli's packets to srv bypass the node while srv's
// replies, by its default route, go through it: the node sees a SYN-ACK without its SYN.
// Reverse-path filtering is off where packets arrive on the other path.
func shortcut(t *testing.T, cli, srv *guestutil.Pod) {
	t.Helper()
	h, err := netlink.NewHandleAt(cli.NS, unix.NETLINK_ROUTE)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "short"}, PeerName: "short", PeerNamespace: netlink.NsFd(int(srv.NS))}
	if err := h.LinkAdd(veth); err != nil {
		t.Fatalf("veth between %s and %s: %v", cli.Name, srv.Name, err)
	}
	for _, p := range []*guestutil.Pod{cli, srv} {
		guestutil.RunIn(t, p.NS, "ip", "link", "set", "short", "up")
		for _, dev := range []string{"all", "eth0", "short"} {
			guestutil.RunIn(t, p.NS, "sysctl", "-qw", "net.ipv4.conf."+dev+".rp_filter=0")
		}
	}
	guestutil.RunIn(t, cli.NS, "ip", "route", "add", srv.IP(4).String()+"/32", "dev", "short")
}

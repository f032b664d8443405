//go:build guest

package iptproxy

// Real packets through the rules, in the test guest: pods are network namespaces routed
// through this (node) namespace, Services are built with proxy.BuildService and driven
// through the package exactly as the controller would (Stage, Open, Resync). Nothing binds
// the VIPs: DNAT does the work.

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/kube-ipvs/kube-ipvs/iptables"
	"github.com/kube-ipvs/kube-ipvs/proxy"
	"github.com/kube-ipvs/kube-ipvs/test/guestutil"
	"github.com/kube-ipvs/kube-ipvs/test/netnstest"
)

var (
	guestNodeV4 = netip.MustParseAddr("192.168.1.10")
	guestNodeV6 = netip.MustParseAddr("2001:db8::10")
)

// bench is one node: a network namespace with the node's addresses on a dummy device
// (which is also where the default routes lead, so unknown destinations are routable), IP
// forwarding on, and a Proxy on the real iptables tools.
type bench struct {
	t    *testing.T
	p    *Proxy
	pcfg *proxy.Config
}

func newBench(t *testing.T, backend iptables.Backend) *bench {
	t.Helper()
	guestutil.EnterNode(t, guestNodeV4, guestNodeV6)
	netnstest.Run(t, "ip", "route", "add", "default", "dev", guestutil.NodeLink)
	netnstest.Run(t, "ip", "-6", "route", "add", "default", "dev", guestutil.NodeLink)

	p, err := New(iptables.OSExec{}, Config{Tools: iptables.Config{Backend: backend}, ClusterCIDRs: []netip.Prefix{
		netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("fd00:244::/64")}})
	if err != nil {
		t.Fatal(err)
	}
	nodeIPs := []netip.Addr{guestNodeV4, guestNodeV6}
	p.SetNodeIPs(nodeIPs)
	if r := p.Resync(); r.Err != nil || r.Restores != 2 {
		t.Fatalf("first Resync: %+v, want 2 restores", r)
	}
	t.Cleanup(func() {
		if err := p.Cleanup(); err != nil {
			t.Errorf("Cleanup: %v", err)
		}
	})
	return &bench{t: t, p: p, pcfg: &proxy.Config{DefaultScheduler: "rr", NodeName: testNode, NodeIPs: nodeIPs}}
}

// apply builds the Service's desired state from its EndpointSlices and writes it (Stage,
// Open), as one controller sync does.
func (b *bench) apply(svc *corev1.Service, slices ...*discoveryv1.EndpointSlice) rulesResult {
	b.t.Helper()
	var clean []*discoveryv1.EndpointSlice
	for _, s := range slices {
		if s != nil {
			clean = append(clean, s)
		}
	}
	b.p.Stage(nameOf(svc), proxy.BuildService(svc, clean, b.pcfg))
	r := b.p.Open()
	if r.Err != nil {
		b.t.Fatalf("Open: %v", r.Err)
	}
	return r
}

// resyncClean checks that the kernel holds exactly what was written: a Resync, which
// compares -save against the desired state, restores nothing.
func (b *bench) resyncClean() {
	b.t.Helper()
	if r := b.p.Resync(); r.Err != nil || r.Restores != 0 {
		b.t.Errorf("Resync on intact rules: %+v, want no restore (-save reads back differently from what was written?)", r)
	}
}

// askFrom asks once from a pod (nil: the node) with a short timeout and classifies the
// outcome: the answer, "refused", "timeout" or "error: ...".
func askFrom(p *guestutil.Pod, network string, to netip.AddrPort, timeout time.Duration) string {
	var c net.Conn
	dial := func() (err error) {
		c, err = net.DialTimeout(network, to.String(), timeout)
		return err
	}
	var err error
	if p == nil {
		err = dial()
	} else {
		err = guestutil.InNamespace(p.NS, dial)
	}
	if err == nil {
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(timeout))
		if network == "udp" {
			_, err = c.Write([]byte("who\n"))
		}
		if err == nil {
			buf := make([]byte, 256)
			var n int
			n, err = c.Read(buf)
			if err == nil {
				return strings.TrimSpace(string(buf[:n]))
			}
		}
	}
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "refused"
	case errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	}
	return "error: " + err.Error()
}

func ap(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

// counts asks n times and counts the answers.
func counts(t *testing.T, p *guestutil.Pod, network, to string, n int) map[string]int {
	t.Helper()
	got := map[string]int{}
	for i := 0; i < n; i++ {
		got[askFrom(p, network, ap(to), 5*time.Second)]++
	}
	return got
}

func onlyNames(t *testing.T, what string, got map[string]int, names ...string) {
	t.Helper()
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	for a, n := range got {
		if !want[a] {
			t.Errorf("%s: %d answers %q; want only %v (all: %v)", what, n, a, names, got)
		}
	}
	for _, n := range names {
		if got[n] == 0 {
			t.Errorf("%s: %s never answered: %v", what, n, got)
		}
	}
}

// ClusterIP (from a pod and from the node), NodePort from another namespace and UDP, on
// both iptables backends; -save reads back as written; a chain someone flushed is
// restored by Resync.
func TestGuestClusterIPNodePortUDP(t *testing.T) {
	for _, backend := range []iptables.Backend{iptables.NFT, iptables.Legacy} {
		t.Run(string(backend), func(t *testing.T) {
			b := newBench(t, backend)
			a1 := guestutil.NewPod(t, "a1", netip.MustParseAddr("10.244.1.11"))
			a2 := guestutil.NewPod(t, "a2", netip.MustParseAddr("10.244.2.12"))
			c := guestutil.NewPod(t, "c", netip.MustParseAddr("10.244.9.1"))
			o := guestutil.NewPod(t, "o", netip.MustParseAddr("198.51.100.7"))
			for _, p := range []*guestutil.Pod{a1, a2} {
				p.ServeTCP(t, 8080, p.Name)
				p.ServeUDP(t, 5353, p.Name)
			}
			web := makeService(svcOpts{name: "web", clusterIPs: []string{"10.96.0.10"}, typ: corev1.ServiceTypeNodePort, port: 80, nodePort: 30080})
			dns := makeService(svcOpts{name: "dns", clusterIPs: []string{"10.96.0.53"}, proto: corev1.ProtocolUDP, port: 53, targetPort: 5353})
			b.apply(web, makeSlice(web, 8080, ep{"10.244.1.11", true}, ep{"10.244.2.12", false}))
			b.apply(dns, makeSlice(dns, 5353, ep{"10.244.1.11", true}, ep{"10.244.2.12", false}))

			onlyNames(t, "pod -> ClusterIP", counts(t, c, "tcp", "10.96.0.10:80", 20), "a1", "a2")
			onlyNames(t, "node -> ClusterIP", counts(t, nil, "tcp", "10.96.0.10:80", 20), "a1", "a2")
			onlyNames(t, "other namespace -> NodePort", counts(t, o, "tcp", "192.168.1.10:30080", 20), "a1", "a2")
			onlyNames(t, "pod -> UDP ClusterIP", counts(t, c, "udp", "10.96.0.53:53", 20), "a1", "a2")
			b.resyncClean()

			// Someone flushes the Service's chain: no DNAT any more, until Resync.
			svcChain := chainName(prefixSVC, "ns/web:p/TCP")
			if _, err := (iptables.OSExec{}).Run([]byte("*nat\n-F "+svcChain+"\nCOMMIT\n"), "iptables-"+string(backend)+"-restore", "--noflush"); err != nil {
				t.Fatal(err)
			}
			if got := askFrom(c, "tcp", ap("10.96.0.10:80"), time.Second); got != "timeout" {
				t.Errorf("after the flush: %q, want timeout (the VIP goes nowhere)", got)
			}
			if r := b.p.Resync(); r.Err != nil || r.Restores != 1 {
				t.Errorf("Resync after a flush: %+v, want 1 restore", r)
			}
			onlyNames(t, "pod -> ClusterIP after Resync", counts(t, c, "tcp", "10.96.0.10:80", 10), "a1", "a2")
			b.resyncClean()
		})
	}
}

// ClientIP affinity: each client always reaches one backend.
func TestGuestClientIPAffinity(t *testing.T) {
	b := newBench(t, iptables.Auto)
	var eps []ep
	for i := 1; i <= 3; i++ {
		ip := fmt.Sprintf("10.244.2.%d", i)
		p := guestutil.NewPod(t, fmt.Sprintf("b%d", i), netip.MustParseAddr(ip))
		p.ServeTCP(t, 8080, p.Name)
		eps = append(eps, ep{ip, false})
	}
	c1 := guestutil.NewPod(t, "c1", netip.MustParseAddr("10.244.9.1"))
	c2 := guestutil.NewPod(t, "c2", netip.MustParseAddr("10.244.9.2"))
	svc := makeService(svcOpts{name: "sticky", clusterIPs: []string{"10.96.0.20"}, port: 80, affinity: 600})
	b.apply(svc, makeSlice(svc, 8080, eps...))
	for _, c := range []*guestutil.Pod{c1, c2} {
		got := counts(t, c, "tcp", "10.96.0.20:80", 30)
		if len(got) != 1 {
			t.Errorf("client %s reached %v, want one backend every time", c.Name, got)
		}
		for a := range got {
			if !strings.HasPrefix(a, "b") {
				t.Errorf("client %s: answer %q", c.Name, a)
			}
		}
	}
	b.resyncClean()
}

// An endpoint change is followed by new connections, with one restore.
func TestGuestEndpointChangeFollowed(t *testing.T) {
	b := newBench(t, iptables.Auto)
	a1 := guestutil.NewPod(t, "a1", netip.MustParseAddr("10.244.1.11"))
	a2 := guestutil.NewPod(t, "a2", netip.MustParseAddr("10.244.2.12"))
	c := guestutil.NewPod(t, "c", netip.MustParseAddr("10.244.9.1"))
	a1.ServeTCP(t, 8080, "a1")
	a2.ServeTCP(t, 8080, "a2")
	svc := makeService(svcOpts{name: "web", clusterIPs: []string{"10.96.0.10"}, port: 80})
	b.apply(svc, makeSlice(svc, 8080, ep{"10.244.1.11", true}))
	onlyNames(t, "one endpoint", counts(t, c, "tcp", "10.96.0.10:80", 5), "a1")
	if r := b.apply(svc, makeSlice(svc, 8080, ep{"10.244.2.12", false})); r.Restores != 1 || r.Entries != 1 {
		t.Errorf("endpoint replaced: %+v, want 1 restore, 1 endpoint chain", r)
	}
	onlyNames(t, "replaced endpoint", counts(t, c, "tcp", "10.96.0.10:80", 10), "a2")
	b.apply(svc, makeSlice(svc, 8080, ep{"10.244.1.11", true}, ep{"10.244.2.12", false}))
	onlyNames(t, "both endpoints", counts(t, c, "tcp", "10.96.0.10:80", 30), "a1", "a2")
	// The Service goes away: its rules too.
	b.p.Stage(nameOf(svc), nil)
	if r := b.p.Open(); r.Err != nil || r.Restores != 1 || r.Entries != 0 {
		t.Errorf("deletion: %+v", r)
	}
	if s := netnstest.Run(t, "iptables-save"); strings.Contains(s, "ns/web") {
		t.Errorf("rules of the deleted Service remain:\n%s", s)
	}
	b.resyncClean()
}

// externalTrafficPolicy=Local keeps the client address on a NodePort; Cluster
// masquerades it; pods keep theirs on the ClusterIP; hairpin and the node are
// masqueraded.
func TestGuestTrafficPolicyAndMasquerade(t *testing.T) {
	b := newBench(t, iptables.Auto)
	w1 := guestutil.NewPod(t, "w1", netip.MustParseAddr("10.244.1.11")) // on this node
	w2 := guestutil.NewPod(t, "w2", netip.MustParseAddr("10.244.2.12")) // "on another node"
	c := guestutil.NewPod(t, "c", netip.MustParseAddr("10.244.9.1"))
	o := guestutil.NewPod(t, "o", netip.MustParseAddr("198.51.100.7"))
	w1.ServeTCPWho(t, 8080, "w1")
	w2.ServeTCPWho(t, 8080, "w2")
	eps := []ep{{"10.244.1.11", true}, {"10.244.2.12", false}}
	local := makeService(svcOpts{name: "local", clusterIPs: []string{"10.96.0.11"}, typ: corev1.ServiceTypeNodePort, port: 80, nodePort: 30081, local: true})
	cluster := makeService(svcOpts{name: "cluster", clusterIPs: []string{"10.96.0.12"}, typ: corev1.ServiceTypeNodePort, port: 80, nodePort: 30082})
	b.apply(local, makeSlice(local, 8080, eps...))
	b.apply(cluster, makeSlice(cluster, 8080, eps...))

	onlyNames(t, "eTP=Local NodePort", counts(t, o, "tcp", "192.168.1.10:30081", 10), "w1 198.51.100.7")
	onlyNames(t, "eTP=Cluster NodePort", counts(t, o, "tcp", "192.168.1.10:30082", 20), "w1 169.254.1.1", "w2 169.254.1.1")
	onlyNames(t, "pod -> ClusterIP", counts(t, c, "tcp", "10.96.0.12:80", 20), "w1 10.244.9.1", "w2 10.244.9.1")
	onlyNames(t, "node -> ClusterIP", counts(t, nil, "tcp", "10.96.0.12:80", 20), "w1 169.254.1.1", "w2 169.254.1.1")
	// Hairpin: w1 reaching itself through its Service is masqueraded; reaching w2 is not.
	onlyNames(t, "w1 -> its own ClusterIP", counts(t, w1, "tcp", "10.96.0.12:80", 20), "w1 169.254.1.1", "w2 10.244.1.11")
	// A pod using the eTP=Local NodePort reaches any endpoint (the ClusterIP's), keeping
	// its address.
	onlyNames(t, "pod -> eTP=Local NodePort", counts(t, c, "tcp", "192.168.1.10:30081", 20), "w1 10.244.9.1", "w2 10.244.9.1")
	// Without local endpoints, external traffic is dropped.
	b.apply(local, makeSlice(local, 8080, ep{"10.244.2.12", false}))
	if got := askFrom(o, "tcp", ap("192.168.1.10:30081"), time.Second); got != "timeout" {
		t.Errorf("eTP=Local without local endpoints: %q, want timeout (dropped)", got)
	}
	b.resyncClean()
}

// A Service without endpoints answers with a reject at once, not a timeout.
func TestGuestNoEndpointsRejects(t *testing.T) {
	b := newBench(t, iptables.Auto)
	c := guestutil.NewPod(t, "c", netip.MustParseAddr("10.244.9.1"))
	o := guestutil.NewPod(t, "o", netip.MustParseAddr("198.51.100.7"))
	tcp := makeService(svcOpts{name: "tcp", clusterIPs: []string{"10.96.0.40"}, typ: corev1.ServiceTypeNodePort, port: 80, nodePort: 30040})
	udp := makeService(svcOpts{name: "udp", clusterIPs: []string{"10.96.0.41"}, proto: corev1.ProtocolUDP, port: 53})
	b.apply(tcp)
	b.apply(udp)
	for _, tc := range []struct {
		who     string
		p       *guestutil.Pod
		network string
		to      string
	}{
		{"pod", c, "tcp", "10.96.0.40:80"},
		{"node", nil, "tcp", "10.96.0.40:80"},
		{"other namespace", o, "tcp", "192.168.1.10:30040"},
		{"pod", c, "udp", "10.96.0.41:53"},
	} {
		start := time.Now()
		got := askFrom(tc.p, tc.network, ap(tc.to), 3*time.Second)
		if took := time.Since(start); got != "refused" || took > time.Second {
			t.Errorf("%s -> %s/%s: %q after %v, want refused at once", tc.who, tc.network, tc.to, got, took)
		}
	}
	b.resyncClean()
}

// Random choice spreads connections over 3 endpoints: each gets 15% to 55% of 300.
func TestGuestRandomSpread(t *testing.T) {
	b := newBench(t, iptables.Auto)
	var eps []ep
	var names []string
	for i := 1; i <= 3; i++ {
		ip := fmt.Sprintf("10.244.2.%d", i)
		p := guestutil.NewPod(t, fmt.Sprintf("b%d", i), netip.MustParseAddr(ip))
		p.ServeTCP(t, 8080, p.Name)
		eps = append(eps, ep{ip, false})
		names = append(names, p.Name)
	}
	c := guestutil.NewPod(t, "c", netip.MustParseAddr("10.244.9.1"))
	svc := makeService(svcOpts{name: "spread", clusterIPs: []string{"10.96.0.30"}, port: 80})
	b.apply(svc, makeSlice(svc, 8080, eps...))
	got := counts(t, c, "tcp", "10.96.0.30:80", 300)
	t.Logf("300 connections: %v", got)
	onlyNames(t, "spread", got, names...)
	for _, n := range names {
		if got[n] < 45 || got[n] > 165 {
			t.Errorf("%s got %d of 300, want 45..165", n, got[n])
		}
	}
}

// loadBalancerSourceRanges: sources outside are dropped, the node itself included until a
// range holds its address.
func TestGuestSourceRanges(t *testing.T) {
	b := newBench(t, iptables.Auto)
	w := guestutil.NewPod(t, "w", netip.MustParseAddr("10.244.2.12"))
	in := guestutil.NewPod(t, "in", netip.MustParseAddr("198.51.100.7"))
	out := guestutil.NewPod(t, "out", netip.MustParseAddr("192.0.2.9"))
	w.ServeTCPWho(t, 8080, "w")
	lb := makeService(svcOpts{name: "lb", clusterIPs: []string{"10.96.0.50"}, typ: corev1.ServiceTypeLoadBalancer, port: 80, nodePort: 30050,
		lbIPs: []string{"203.0.113.10"}, ranges: []string{"198.51.100.0/24"}})
	slice := makeSlice(lb, 8080, ep{"10.244.2.12", false})
	b.apply(lb, slice)
	expect := func(who string, p *guestutil.Pod, want string) {
		t.Helper()
		if got := askFrom(p, "tcp", ap("203.0.113.10:80"), 1500*time.Millisecond); got != want {
			t.Errorf("%s -> LB IP: %q, want %q", who, got, want)
		}
	}
	expect("in range", in, "w 169.254.1.1")
	expect("out of range", out, "timeout")
	expect("node", nil, "timeout")
	lb2 := lb.DeepCopy()
	lb2.Spec.LoadBalancerSourceRanges = append(lb2.Spec.LoadBalancerSourceRanges, "192.168.1.0/24")
	if r := b.apply(lb2, slice); r.Restores != 1 {
		t.Errorf("adding a range: %+v, want 1 restore", r)
	}
	expect("node (its range added)", nil, "w 169.254.1.1")
	expect("out of range", out, "timeout")
	b.resyncClean()
}

// IPv6 through ip6tables: ClusterIP and NodePort of a dual-stack Service.
func TestGuestIPv6(t *testing.T) {
	b := newBench(t, iptables.Auto)
	w := guestutil.NewPod(t, "w", netip.MustParseAddr("10.244.2.12"), netip.MustParseAddr("fd00:244::12"))
	c := guestutil.NewPod(t, "c", netip.MustParseAddr("10.244.9.1"), netip.MustParseAddr("fd00:244::91"))
	o := guestutil.NewPod(t, "o", netip.MustParseAddr("198.51.100.7"), netip.MustParseAddr("2001:db8:5::7"))
	w.ServeTCPWho(t, 8080, "w")
	svc := makeService(svcOpts{name: "dual", clusterIPs: []string{"10.96.0.60", "fd00:96::60"}, typ: corev1.ServiceTypeNodePort, port: 80, nodePort: 30060})
	b.apply(svc, makeSlice(svc, 8080, ep{"10.244.2.12", false}), makeSlice(svc, 8080, ep{"fd00:244::12", false}))
	onlyNames(t, "pod -> IPv6 ClusterIP", counts(t, c, "tcp", "[fd00:96::60]:80", 5), "w fd00:244::91")
	onlyNames(t, "pod -> IPv4 ClusterIP", counts(t, c, "tcp", "10.96.0.60:80", 5), "w 10.244.9.1")
	got := counts(t, o, "tcp", "[2001:db8::10]:30060", 5)
	for a := range got {
		if !strings.HasPrefix(a, "w ") || strings.HasSuffix(a, "2001:db8:5::7") {
			t.Errorf("IPv6 NodePort (policy Cluster, masqueraded): %v", got)
		}
	}
	b.resyncClean()
}

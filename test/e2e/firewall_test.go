//go:build guest

package e2e

import (
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/kube-ipvs/kube-ipvs/test/guestutil"
)

// who asks a "NAME SOURCE" server through addr and returns both words.
func who(t *testing.T, from *guestutil.Pod, addr string) (string, string) {
	t.Helper()
	line, err := from.AskTCP(netip.MustParseAddrPort(addr))
	if err != nil {
		t.Fatalf("%s -> %s: %v", from.Name, addr, err)
	}
	name, src, _ := strings.Cut(line, " ")
	return name, src
}

// Masquerade: with --cluster-cidr, a client outside it reaching a ClusterIP is masqueraded
// (the backend answers through this node), a pod inside it is not; NodePort traffic with
// externalTrafficPolicy=Cluster is masqueraded; with Local the backend sees the client.
func TestMasqueradeAndClientIP(t *testing.T) {
	dir := setupNode(t)
	back := guestutil.NewPod(t, "mqb", netip.MustParseAddr("10.244.15.11"))
	back.ServeTCPWho(t, 8080, "mqb")
	pod := client(t, "mqp", "10.244.9.15")
	outside := client(t, "mqo", "198.18.0.15")
	writeManifests(t, dir, "svc.yaml",
		serviceYAML(svcOpts{name: "cip", clusterIP: "10.96.150.1", port: 80, targetPort: 8080}),
		sliceYAML("cip", "cip-1", "TCP", 8080, "", eps("10.244.15.11")...),
		serviceYAML(svcOpts{name: "npc", typ: "NodePort", clusterIP: "10.96.150.2", port: 80, targetPort: 8080, nodePort: 30150}),
		sliceYAML("npc", "npc-1", "TCP", 8080, "", eps("10.244.15.11")...),
		strings.Replace(serviceYAML(svcOpts{name: "npl", typ: "NodePort", clusterIP: "10.96.150.3", port: 80, targetPort: 8080, nodePort: 30151}),
			"  ports:", "  externalTrafficPolicy: Local\n  ports:", 1),
		sliceYAML("npl", "npl-1", "TCP", 8080, "", eps("10.244.15.11")...))
	startProxy(t, dir, "--cluster-cidr", "10.244.0.0/16")
	eventually(t, firstSync, "the virtual servers", func() bool { return realServers(vsBlock(t, "TCP", nodeIP+":30151")) == 1 })

	if _, src := who(t, pod, "10.96.150.1:80"); src != "10.244.9.15" {
		t.Errorf("a pod inside the cluster CIDR reached the ClusterIP as %s, want its own address", src)
	}
	if _, src := who(t, outside, "10.96.150.1:80"); src == "198.18.0.15" {
		t.Errorf("a client outside the cluster CIDR was not masqueraded on the ClusterIP")
	}
	if _, src := who(t, outside, nodeIP+":30150"); src == "198.18.0.15" {
		t.Errorf("NodePort with externalTrafficPolicy=Cluster was not masqueraded")
	}
	if _, src := who(t, outside, nodeIP+":30151"); src != "198.18.0.15" {
		t.Errorf("NodePort with externalTrafficPolicy=Local shows source %s, want the client's 198.18.0.15", src)
	}
}

// --masquerade-all masquerades even pods inside the cluster CIDR.
func TestMasqueradeAll(t *testing.T) {
	dir := setupNode(t)
	back := guestutil.NewPod(t, "mab", netip.MustParseAddr("10.244.16.11"))
	back.ServeTCPWho(t, 8080, "mab")
	pod := client(t, "map", "10.244.9.16")
	writeManifests(t, dir, "svc.yaml",
		serviceYAML(svcOpts{name: "cip", clusterIP: "10.96.160.1", port: 80, targetPort: 8080}),
		sliceYAML("cip", "cip-1", "TCP", 8080, "", eps("10.244.16.11")...))
	startProxy(t, dir, "--cluster-cidr", "10.244.0.0/16", "--masquerade-all")
	eventually(t, firstSync, "the virtual server", func() bool { return realServers(vsBlock(t, "TCP", "10.96.160.1:80")) == 1 })
	if _, src := who(t, pod, "10.96.160.1:80"); src == "10.244.9.16" {
		t.Errorf("--masquerade-all did not masquerade a pod")
	}
}

// Hairpin: a pod that reaches its own Service and is chosen as the backend gets its answer.
func TestHairpin(t *testing.T) {
	dir := setupNode(t)
	self := guestutil.NewPod(t, "hp", netip.MustParseAddr("10.244.17.11"))
	self.ServeTCP(t, 8080, "hp")
	writeManifests(t, dir, "svc.yaml",
		serviceYAML(svcOpts{name: "self", clusterIP: "10.96.170.1", port: 80, targetPort: 8080}),
		sliceYAML("self", "self-1", "TCP", 8080, "", eps("10.244.17.11")...))
	startProxy(t, dir, "--cluster-cidr", "10.244.0.0/16")
	eventually(t, firstSync, "the virtual server", func() bool { return realServers(vsBlock(t, "TCP", "10.96.170.1:80")) == 1 })
	if got := ask(t, self, "10.96.170.1:80", 3); got["hp"] != 3 {
		t.Errorf("hairpin answers: %v", got)
	}
}

// loadBalancerSourceRanges: an allowed source connects, another is dropped, and the node
// itself is filtered too (kubernetes #119656).
func TestLoadBalancerSourceRanges(t *testing.T) {
	dir := setupNode(t)
	back := guestutil.NewPod(t, "srb", netip.MustParseAddr("10.244.18.11"))
	back.ServeTCP(t, 8080, "srb")
	allowed := client(t, "sra", "198.18.1.5")
	denied := client(t, "srd", "198.18.2.5")
	svc := serviceYAML(svcOpts{name: "lb", typ: "LoadBalancer", clusterIP: "10.96.180.1", port: 80, targetPort: 8080, nodePort: 30180, lbIP: "198.51.100.180"})
	svc = strings.Replace(svc, "  ports:", "  loadBalancerSourceRanges: [198.18.1.0/24]\n  ports:", 1)
	writeManifests(t, dir, "svc.yaml", svc, sliceYAML("lb", "lb-1", "TCP", 8080, "", eps("10.244.18.11")...))
	startProxy(t, dir, "--cluster-cidr", "10.244.0.0/16")
	eventually(t, firstSync, "the LB virtual server", func() bool { return realServers(vsBlock(t, "TCP", "198.51.100.180:80")) == 1 })

	if got := ask(t, allowed, "198.51.100.180:80", 2); got["srb"] != 2 {
		t.Errorf("allowed source: %v", got)
	}
	if _, err := denied.AskTCP(netip.MustParseAddrPort("198.51.100.180:80")); err == nil {
		t.Errorf("a source outside loadBalancerSourceRanges reached the LB IP")
	}
	c, err := net.DialTimeout("tcp", "198.51.100.180:80", 2*time.Second)
	if err == nil {
		c.Close()
		t.Errorf("the node itself reached the LB IP although no source range allows it (kubernetes #119656)")
	}
	// The ClusterIP is not subject to the LB's source ranges.
	if got := ask(t, denied, "10.96.180.1:80", 1); got["srb"] != 1 {
		t.Errorf("ClusterIP from the denied source: %v", got)
	}
}

// VIP filtering (kubernetes #72236): a node process listening on 0.0.0.0:P is not reachable
// through a ClusterIP on P when no Service exposes P there, while Service ports work.
func TestVIPFilterHidesNodeServices(t *testing.T) {
	dir := setupNode(t)
	back := guestutil.NewPod(t, "vfb", netip.MustParseAddr("10.244.19.11"))
	back.ServeTCP(t, 8080, "vfb")
	cli := client(t, "vfc", "10.244.9.19")
	guestutil.ServeNode(t, "tcp", "0.0.0.0:9099", "node-service")
	writeManifests(t, dir, "svc.yaml",
		serviceYAML(svcOpts{name: "web", clusterIP: "10.96.190.1", port: 80, targetPort: 8080}),
		sliceYAML("web", "web-1", "TCP", 8080, "", eps("10.244.19.11")...))
	startProxy(t, dir, "--cluster-cidr", "10.244.0.0/16")
	eventually(t, firstSync, "the virtual server", func() bool { return realServers(vsBlock(t, "TCP", "10.96.190.1:80")) == 1 })

	if got := ask(t, cli, "10.96.190.1:80", 1); got["vfb"] != 1 {
		t.Errorf("the Service port: %v", got)
	}
	if line, err := cli.AskTCP(netip.MustParseAddrPort("10.96.190.1:9099")); err == nil {
		t.Errorf("the node's own service on port 9099 answered %q through the ClusterIP", line)
	}
	// Reached directly on the node's address it still works: only the VIP path is closed.
	if line, err := cli.AskTCP(netip.MustParseAddrPort(nodeIP + ":9099")); err != nil || line != "node-service" {
		t.Errorf("the node's own service on its own address: %q, %v", line, err)
	}
}

// --strict-arp sets arp_ignore=1 and arp_announce=2; the IPVS sysctls and the
// --ipvs-*-timeout flags are applied at start.
func TestKernelSettingsAtStart(t *testing.T) {
	dir := setupNode(t)
	guestutil.WriteSysctl(t, "net.ipv4.conf.all.arp_ignore", "0")
	guestutil.WriteSysctl(t, "net.ipv4.conf.all.arp_announce", "0")
	guestutil.WriteSysctl(t, "net.ipv4.vs.conntrack", "0")
	guestutil.WriteSysctl(t, "net.ipv4.vs.expire_nodest_conn", "0")
	p := startProxy(t, dir, "--strict-arp", "--ipvs-tcp-timeout", "901s", "--ipvs-tcpfin-timeout", "61s", "--ipvs-udp-timeout", "31s")
	p.waitLog(`msg="sync done"`)
	if out := ipvsadm(t, "--timeout"); !strings.Contains(out, "Timeout (tcp tcpfin udp): 901 61 31") {
		t.Errorf("IPVS timeouts: %s", out)
	}
	for _, name := range []string{"net/ipv4/vs/conntrack", "net/ipv4/vs/expire_nodest_conn", "net/ipv4/vs/expire_quiescent_template", "net/ipv4/ip_forward"} {
		if b, err := os.ReadFile("/proc/sys/" + name); err != nil || strings.TrimSpace(string(b)) != "1" {
			t.Errorf("%s = %q (%v), want 1", name, b, err)
		}
	}
	for name, want := range map[string]string{"arp_ignore": "1", "arp_announce": "2"} {
		b, err := os.ReadFile("/proc/sys/net/ipv4/conf/all/" + name)
		if err != nil || strings.TrimSpace(string(b)) != want {
			t.Errorf("%s = %q (%v), want %s", name, b, err, want)
		}
	}
}

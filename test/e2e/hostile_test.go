//go:build guest

package e2e

import (
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/kube-ipvs/kube-ipvs/test/guestutil"
	"github.com/kube-ipvs/kube-ipvs/test/netnstest"
)

// Proofs, with real traffic, that one Service's input cannot widen another's filter or cut the
// node off.

// inNamespace moves a manifest generated for namespace e2e into ns.
func inNamespace(doc, ns string) string {
	return strings.ReplaceAll(doc, "namespace: e2e", "namespace: "+ns)
}

// setMembers returns the `ipset list` output of one set.
func setMembers(t *testing.T, set string) string {
	t.Helper()
	return netnstest.Run(t, "ipset", "list", set)
}

// Two LoadBalancer Services share one LB IP and port. The first (a/lb) wins; the loser
// (b/lb, which would allow 0.0.0.0/1) writes nothing for it: a client only b/lb would allow
// is refused, b/lb's range is in no set, and the log names the winner. When a/lb goes,
// b/lb takes over with its own range.
func TestLoadBalancerConflictLoserWritesNothing(t *testing.T) {
	dir := setupNode(t)
	backA := guestutil.NewPod(t, "cfa", netip.MustParseAddr("10.244.21.11"))
	backA.ServeTCP(t, 8080, "cfa")
	backB := guestutil.NewPod(t, "cfb", netip.MustParseAddr("10.244.21.12"))
	backB.ServeTCP(t, 8080, "cfb")
	onlyA := client(t, "cfoa", "198.18.1.21")
	onlyB := client(t, "cfob", "100.64.0.21")
	lb := func(ns, rng, ep string, nodePort int) []string {
		svc := serviceYAML(svcOpts{name: "lb", typ: "LoadBalancer", clusterIP: "10.96.210." + ep[len(ep)-2:], port: 80, targetPort: 8080, nodePort: nodePort, lbIP: "198.51.100.210"})
		svc = strings.Replace(svc, "  ports:", "  loadBalancerSourceRanges: ["+rng+"]\n  ports:", 1)
		return []string{inNamespace(svc, ns), inNamespace(sliceYAML("lb", "lb-1", "TCP", 8080, "", eps(ep)...), ns)}
	}
	a, b := lb("a", "198.18.1.0/24", "10.244.21.11", 30210), lb("b", "0.0.0.0/1", "10.244.21.12", 30211)
	writeManifests(t, dir, "svc.yaml", append(a, b...)...)
	p := startProxy(t, dir, "--cluster-cidr", "10.244.0.0/16")
	eventually(t, firstSync, "the LB virtual server", func() bool { return realServers(vsBlock(t, "TCP", "198.51.100.210:80")) == 1 })
	p.waitLog(`service=b/lb reason=VirtualServerConflict message="TCP 198.51.100.210:80 is already served by Service a/lb`)

	if got := ask(t, onlyA, "198.51.100.210:80", 2); got["cfa"] != 2 {
		t.Errorf("the winner's allowed client: %v", got)
	}
	if line, err := onlyB.AskTCP(netip.MustParseAddrPort("198.51.100.210:80")); err == nil {
		t.Errorf("a client only the losing Service allows reached the LB IP (answer %q): its range widened the winner's filter", line)
	}
	if m := setMembers(t, "KIPVS-LB-SOURCE-CIDR"); strings.Contains(m, "0.0.0.0/1") || !strings.Contains(m, "198.18.1.0/24") {
		t.Errorf("KIPVS-LB-SOURCE-CIDR should hold the winner's range only:\n%s", m)
	}
	// The loser keeps what is not contested: its own ClusterIP and node port.
	if got := ask(t, onlyB, nodeIP+":30211", 1); got["cfb"] != 1 {
		t.Errorf("the losing Service's own node port: %v", got)
	}

	writeManifests(t, dir, "svc.yaml", b...)
	p.reload()
	eventually(t, firstSync, "b/lb to take the LB IP over", func() bool {
		line, err := onlyB.AskTCP(netip.MustParseAddrPort("198.51.100.210:80"))
		return err == nil && line == "cfb"
	})
	if line, err := onlyA.AskTCP(netip.MustParseAddrPort("198.51.100.210:80")); err == nil {
		t.Errorf("after the take-over, a client outside b/lb's range got %q", line)
	}
	if m := setMembers(t, "KIPVS-LB-SOURCE-CIDR"); strings.Contains(m, "198.18.1.0/24") || !strings.Contains(m, "0.0.0.0/1") {
		t.Errorf("after the take-over KIPVS-LB-SOURCE-CIDR should hold b/lb's range only:\n%s", m)
	}
}

// A single-stack IPv4 NodePort Service gets no node port on the node's IPv6 address: a node
// process listening on [::]:port still answers there.
func TestNodePortOnlyInTheServiceFamilies(t *testing.T) {
	dir := setupNode(t)
	const nodeV6 = "2001:db8:113::10"
	l, err := netlink.LinkByName("node0")
	if err != nil {
		t.Fatal(err)
	}
	if err := netlink.AddrAdd(l, &netlink.Addr{IPNet: &net.IPNet{IP: net.ParseIP(nodeV6), Mask: net.CIDRMask(64, 128)}, Flags: 0x80 /* nodad */}); err != nil {
		t.Fatal(err)
	}
	back := guestutil.NewPod(t, "nfb", netip.MustParseAddr("10.244.22.11"))
	back.ServeTCP(t, 8080, "nfb")
	cli := client(t, "nfc", "10.244.9.22")
	cli6 := guestutil.NewPod(t, "nfc6", netip.MustParseAddr("fd00:244::9:22"))
	guestutil.ServeNode(t, "tcp6", "[::]:30220", "node-service")
	writeManifests(t, dir, "svc.yaml",
		serviceYAML(svcOpts{name: "np", typ: "NodePort", clusterIP: "10.96.220.1", port: 80, targetPort: 8080, nodePort: 30220}),
		sliceYAML("np", "np-1", "TCP", 8080, "", eps("10.244.22.11")...))
	startProxy(t, dir, "--cluster-cidr", "10.244.0.0/16,fd00:244::/64")
	eventually(t, firstSync, "the IPv4 node port", func() bool { return realServers(vsBlock(t, "TCP", nodeIP+":30220")) == 1 })

	if got := ask(t, cli, nodeIP+":30220", 1); got["nfb"] != 1 {
		t.Errorf("the IPv4 node port: %v", got)
	}
	if block := vsBlock(t, "TCP", "["+nodeV6+"]:30220"); block != "" {
		t.Errorf("an IPv4-only Service got a node port on the node's IPv6 address:\n%s", block)
	}
	if m := setMembers(t, "KIPVS-NODE-PORT-6"); strings.Contains(m, "30220") {
		t.Errorf("KIPVS-NODE-PORT-6 holds the IPv4-only Service's port:\n%s", m)
	}
	if line, err := cli6.AskTCP(netip.MustParseAddrPort("[" + nodeV6 + "]:30220")); err != nil || line != "node-service" {
		t.Errorf("the node's own process on [%s]:30220: %q, %v", nodeV6, line, err)
	}
}

// An externalIP that is the node's own address, or the pods' link-local gateway, is never
// bound to kube-ipvs0 nor filtered: node processes stay reachable on it, and the node's
// NodePorts keep working. The Service is told why.
func TestServiceCannotTakeTheNodeAddresses(t *testing.T) {
	dir := setupNode(t)
	back := guestutil.NewPod(t, "nab", netip.MustParseAddr("10.244.23.11"))
	back.ServeTCP(t, 8080, "nab")
	cli := client(t, "nac", "10.244.9.23")
	guestutil.ServeNode(t, "tcp4", "0.0.0.0:9230", "node-service")
	writeManifests(t, dir, "svc.yaml",
		serviceYAML(svcOpts{name: "own", clusterIP: "10.96.230.1", port: 9231, targetPort: 8080, externalIPs: []string{nodeIP}}),
		sliceYAML("own", "own-1", "TCP", 8080, "", eps("10.244.23.11")...),
		serviceYAML(svcOpts{name: "gw", clusterIP: "10.96.230.2", port: 9232, targetPort: 8080, externalIPs: []string{"169.254.1.1"}}),
		sliceYAML("gw", "gw-1", "TCP", 8080, "", eps("10.244.23.11")...),
		serviceYAML(svcOpts{name: "np", typ: "NodePort", clusterIP: "10.96.230.3", port: 80, targetPort: 8080, nodePort: 30230}),
		sliceYAML("np", "np-1", "TCP", 8080, "", eps("10.244.23.11")...))
	p := startProxy(t, dir, "--cluster-cidr", "10.244.0.0/16")
	eventually(t, firstSync, "the node port", func() bool { return realServers(vsBlock(t, "TCP", nodeIP+":30230")) == 1 })
	p.waitLog(`service=e2e/own reason=ServiceAddressIsNodeAddress`)
	p.waitLog(`service=e2e/gw reason=InvalidIP message=.*169\.254\.1\.1.*link-local`)

	if bound := dummyAddrs(t); bound[nodeIP] || bound["169.254.1.1"] {
		t.Errorf("kube-ipvs0 holds a node address: %v", bound)
	}
	// The VIP filter's set must not hold them; the externalIP's own ip,port entry may stay
	// (its virtual server is kept, as kube-proxy keeps it), which leaves other ports alone.
	if m := setMembers(t, "KIPVS-VIPS"); strings.Contains(m, nodeIP+"\n") || strings.Contains(m, "169.254.1.1") {
		t.Errorf("KIPVS-VIPS holds a node address:\n%s", m)
	}
	if m := setMembers(t, "KIPVS-EXTERNAL-IP"); strings.Contains(m, "169.254.1.1") {
		t.Errorf("KIPVS-EXTERNAL-IP holds the pods' gateway:\n%s", m)
	}
	if line, err := cli.AskTCP(netip.MustParseAddrPort(nodeIP + ":9230")); err != nil || line != "node-service" {
		t.Errorf("the node's own process on its address: %q, %v", line, err)
	}
	if line, err := cli.AskTCP(netip.MustParseAddrPort("169.254.1.1:9230")); err != nil || line != "node-service" {
		t.Errorf("the node's own process on the pods' gateway: %q, %v", line, err)
	}
	if got := ask(t, cli, nodeIP+":30230", 2); got["nab"] != 2 {
		t.Errorf("the node port on the node's address: %v", got)
	}
}

//go:build guest

package e2e

import (
	"net"
	"net/netip"
	"os/exec"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/kube-ipvs/kube-ipvs/dummyif"
	"github.com/kube-ipvs/kube-ipvs/test/guestutil"
)

// nodeIPv6 is the node's IPv6 address: with route binding an IPv6 VIP is no address of the
// node, so a connection from the node to it takes a source from the node's own addresses.
const nodeIPv6 = "fd00:203::10"

// proxyRoutes returns the destinations of the proxy's local routes through kube-ipvs0
// (protocol dummyif.RouteProtocol): the VIPs, with --vip-binding=route.
func proxyRoutes(t *testing.T) map[string]bool {
	t.Helper()
	m := map[string]bool{}
	l, err := netlink.LinkByName("kube-ipvs0")
	if err != nil {
		return m
	}
	filter := &netlink.Route{Table: unix.RT_TABLE_LOCAL, LinkIndex: l.Attrs().Index, Protocol: dummyif.RouteProtocol, Type: unix.RTN_LOCAL}
	routes, err := netlink.RouteListFiltered(netlink.FAMILY_ALL, filter,
		netlink.RT_FILTER_TABLE|netlink.RT_FILTER_OIF|netlink.RT_FILTER_PROTOCOL|netlink.RT_FILTER_TYPE)
	if err != nil {
		t.Fatalf("list the local routes through kube-ipvs0: %v", err)
	}
	for _, r := range routes {
		m[r.Dst.IP.String()] = true
	}
	return m
}

// boundVIPs returns the VIPs bound the given way and those bound the other way (the
// kernel's IPv6 link-local address of an up link aside).
func boundVIPs(t *testing.T, binding dummyif.Binding) (bound, other map[string]bool) {
	t.Helper()
	addrs, routes := dummyAddrs(t), proxyRoutes(t)
	for a := range addrs {
		if netip.MustParseAddr(a).IsLinkLocalUnicast() {
			delete(addrs, a)
		}
	}
	if binding == dummyif.BindRoute {
		return routes, addrs
	}
	return addrs, routes
}

// addNodeIPv6 gives node0 the node's IPv6 address.
func addNodeIPv6(t *testing.T) {
	t.Helper()
	l, err := netlink.LinkByName("node0")
	if err != nil {
		t.Fatal(err)
	}
	a := &netlink.Addr{IPNet: &net.IPNet{IP: net.ParseIP(nodeIPv6), Mask: net.CIDRMask(64, 128)}, Flags: unix.IFA_F_NODAD}
	if err := netlink.AddrAdd(l, a); err != nil {
		t.Fatal(err)
	}
}

// arpAnswered says whether the node answers an ARP request for ip that the pod sends on
// its link to the node, from its first address (busybox arping: exit 0 on a reply).
func arpAnswered(t *testing.T, from *guestutil.Pod, ip string) bool {
	t.Helper()
	var out []byte
	var err error
	_ = from.Do(func() error {
		out, err = exec.Command("/usr/bin/busybox", "arping", "-I", "eth0", "-s", from.Addrs[0].String(), "-c", "2", "-w", "2", "-f", ip).CombinedOutput()
		return nil
	})
	t.Logf("arping %s from %s: %v\n%s", ip, from.Name, err, out)
	return err == nil
}

var bindings = []dummyif.Binding{dummyif.BindAddress, dummyif.BindRoute}

// Both bindings carry the same traffic and filter it the same way: IPv4 and IPv6 VIPs from
// a pod, from a client outside the cluster CIDR (masqueraded) and from the node itself; a
// pod reaching itself through its Service (hairpin); a node service on 0.0.0.0 hidden
// behind the VIP (the VIP filter); and with --strict-arp the node answers no ARP request
// for a VIP, which it does answer with arp_ignore=0, in both.
func TestVIPBindingTrafficAndFiltering(t *testing.T) {
	for _, b := range bindings {
		t.Run(string(b), func(t *testing.T) { testVIPBindingTraffic(t, b) })
	}
}

func testVIPBindingTraffic(t *testing.T, binding dummyif.Binding) {
	dir := setupNode(t)
	addNodeIPv6(t)
	back := guestutil.NewPod(t, "vbb", netip.MustParseAddr("10.244.21.11"), netip.MustParseAddr("fd00:244:21::11"))
	back.ServeTCPWho(t, 8080, "vbb")
	pod := guestutil.NewPod(t, "vbp", netip.MustParseAddr("10.244.9.21"), netip.MustParseAddr("fd00:244:9::21"))
	outside := client(t, "vbo", "198.18.0.21")
	guestutil.ServeNode(t, "tcp", "0.0.0.0:9099", "node-service")
	t.Cleanup(func() {
		guestutil.WriteSysctl(t, "net.ipv4.conf.all.arp_ignore", "0")
		guestutil.WriteSysctl(t, "net.ipv4.conf.all.arp_announce", "0")
	})
	writeManifests(t, dir, "svc.yaml",
		serviceYAML(svcOpts{name: "cip", clusterIP: "10.96.21.1", port: 80, targetPort: 8080, externalIPs: []string{"198.51.100.21"}}),
		sliceYAML("cip", "cip-1", "TCP", 8080, "", eps("10.244.21.11")...),
		serviceYAML(svcOpts{name: "lb", typ: "LoadBalancer", clusterIP: "10.96.21.2", port: 80, targetPort: 8080, nodePort: 30121, lbIP: "198.51.100.22"}),
		sliceYAML("lb", "lb-1", "TCP", 8080, "", eps("10.244.21.11")...),
		strings.Replace(serviceYAML(svcOpts{name: "v6", clusterIP: "fd00:96::21", port: 80, targetPort: 8080}), "  type: ClusterIP\n", "  type: ClusterIP\n  ipFamilies: [IPv6]\n", 1),
		sliceYAML("v6", "v6-1", "TCP", 8080, "IPv6", eps("fd00:244:21::11")...))
	startProxy(t, dir, "--vip-binding", string(binding), "--cluster-cidr", "10.244.0.0/16,fd00:244::/32", "--strict-arp")
	eventually(t, firstSync, "the virtual servers", func() bool {
		return realServers(vsBlock(t, "TCP", "[fd00:96::21]:80")) == 1 && realServers(vsBlock(t, "TCP", "198.51.100.22:80")) == 1
	})
	vips, other := boundVIPs(t, binding)
	if len(other) != 0 {
		t.Errorf("VIPs bound the other way too: %v", other)
	}
	for _, a := range []string{"10.96.21.1", "198.51.100.21", "10.96.21.2", "198.51.100.22", "fd00:96::21"} {
		if !vips[a] {
			t.Errorf("%s is not bound: %v", a, vips)
		}
	}

	// A pod keeps its address on a ClusterIP; traffic to external and load-balancer IPs is
	// masqueraded (in both bindings), so only the name is checked there.
	clusterIP := map[string]string{"10.96.21.1:80": "10.244.9.21", "[fd00:96::21]:80": "fd00:244:9::21"}
	for _, vip := range []string{"10.96.21.1:80", "198.51.100.21:80", "198.51.100.22:80", "[fd00:96::21]:80"} {
		name, src := who(t, pod, vip)
		if want, ok := clusterIP[vip]; name != "vbb" || (ok && src != want) {
			t.Errorf("pod -> %s: %s from %s, want vbb (seeing the pod's own address on a ClusterIP)", vip, name, src)
		}
		line, err := guestutil.AskTCP(netip.MustParseAddrPort(vip))
		if err != nil || !strings.HasPrefix(line, "vbb ") {
			t.Errorf("node -> %s: %q, %v", vip, line, err)
		}
	}
	if name, src := who(t, outside, "10.96.21.1:80"); name != "vbb" || src == "198.18.0.21" {
		t.Errorf("outside -> ClusterIP: %s from %s, want vbb and a masqueraded source", name, src)
	}
	if name, _ := who(t, outside, "198.51.100.22:80"); name != "vbb" {
		t.Errorf("outside -> LB IP: %s", name)
	}
	if name, _ := who(t, back, "10.96.21.1:80"); name != "vbb" {
		t.Errorf("hairpin: %s", name)
	}
	if line, err := pod.AskTCP(netip.MustParseAddrPort("10.96.21.1:9099")); err == nil {
		t.Errorf("the node's own service on port 9099 answered %q through the ClusterIP", line)
	}
	if line, err := pod.AskTCP(netip.MustParseAddrPort(nodeIP + ":9099")); err != nil || line != "node-service" {
		t.Errorf("the node's own service on its own address: %q, %v", line, err)
	}

	if arpAnswered(t, outside, "198.51.100.22") || arpAnswered(t, outside, "10.96.21.1") {
		t.Errorf("with --strict-arp the node answered ARP for a VIP")
	}
	guestutil.WriteSysctl(t, "net.ipv4.conf.all.arp_ignore", "0")
	if !arpAnswered(t, outside, "198.51.100.22") {
		t.Errorf("with arp_ignore=0 the node did not answer ARP for a VIP (as it does in address binding)")
	}
}

// addForeignLocalRoute adds a local route through link with protocol proto, as another
// program would, and removes it when the test ends.
func addForeignLocalRoute(t *testing.T, link, prefix string, proto, metric int) *netlink.Route {
	t.Helper()
	l, err := netlink.LinkByName(link)
	if err != nil {
		t.Fatal(err)
	}
	p := netip.MustParsePrefix(prefix)
	r := &netlink.Route{LinkIndex: l.Attrs().Index, Table: unix.RT_TABLE_LOCAL, Type: unix.RTN_LOCAL, Scope: netlink.SCOPE_HOST,
		Protocol: netlink.RouteProtocol(proto), Priority: metric,
		Dst: &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}}
	if err := netlink.RouteAdd(r); err != nil {
		t.Fatalf("add local route %s through %s: %v", prefix, link, err)
	}
	t.Cleanup(func() { _ = netlink.RouteDel(r) })
	return r
}

// routeThere says whether the exact route (destination, link, protocol) is in the local
// table.
func routeThere(t *testing.T, r *netlink.Route) bool {
	t.Helper()
	got, err := netlink.RouteListFiltered(netlink.FAMILY_V4, r,
		netlink.RT_FILTER_TABLE|netlink.RT_FILTER_OIF|netlink.RT_FILTER_PROTOCOL|netlink.RT_FILTER_DST)
	if err != nil {
		t.Fatal(err)
	}
	return len(got) == 1
}

// A restart that switches --vip-binding converts the VIPs, address to route and back,
// while TCP connections held through an IPv4 and an IPv6 VIP keep working, and leaves no
// binding of the other kind. Foreign local routes, through kube-ipvs0 with another protocol
// and through another link with the proxy's, outlive repairs, the conversion and a cleanup
// plan; the plan lists the proxy's routes.
func TestVIPBindingRestartConvertsKeepingConnections(t *testing.T) {
	dir := setupNode(t)
	addNodeIPv6(t)
	back := guestutil.NewPod(t, "vcb", netip.MustParseAddr("10.244.22.11"), netip.MustParseAddr("fd00:244:22::11"))
	back.ServeTCP(t, 8080, "vcb")
	cli := guestutil.NewPod(t, "vcc", netip.MustParseAddr("10.244.9.22"), netip.MustParseAddr("fd00:244:9::22"))
	writeManifests(t, dir, "svc.yaml",
		serviceYAML(svcOpts{name: "v4", clusterIP: "10.96.22.1", port: 80, targetPort: 8080}),
		sliceYAML("v4", "v4-1", "TCP", 8080, "", eps("10.244.22.11")...),
		strings.Replace(serviceYAML(svcOpts{name: "v6", clusterIP: "fd00:96::22", port: 80, targetPort: 8080}), "  type: ClusterIP\n", "  type: ClusterIP\n  ipFamilies: [IPv6]\n", 1),
		sliceYAML("v6", "v6-1", "TCP", 8080, "IPv6", eps("fd00:244:22::11")...))
	vips := []string{"10.96.22.1", "fd00:96::22"}
	bound := func(b dummyif.Binding) bool {
		got, other := boundVIPs(t, b)
		return len(other) == 0 && len(got) == 2 && got[vips[0]] && got[vips[1]]
	}

	p := startProxy(t, dir, "--vip-binding=address")
	eventually(t, firstSync, "the VIPs bound as addresses", func() bool {
		return bound(dummyif.BindAddress) && realServers(vsBlock(t, "TCP", "[fd00:96::22]:80")) == 1
	})
	var held []*guestutil.Conn
	for _, vip := range []string{"10.96.22.1:80", "[fd00:96::22]:80"} {
		c, err := cli.DialTCP(netip.MustParseAddrPort(vip))
		if err != nil {
			t.Fatalf("connect to %s: %v", vip, err)
		}
		defer c.Close()
		held = append(held, c)
	}
	stillUp := func(when string) {
		t.Helper()
		for _, c := range held {
			if name, err := c.Ask(); err != nil || name != "vcb" {
				t.Errorf("%s: a held connection answered %q, %v", when, name, err)
			}
		}
		for _, vip := range []string{"10.96.22.1:80", "[fd00:96::22]:80"} {
			if got := ask(t, cli, vip, 1); got["vcb"] != 1 {
				t.Errorf("%s: a new connection to %s: %v", when, vip, got)
			}
		}
	}

	for _, step := range []dummyif.Binding{dummyif.BindRoute, dummyif.BindAddress} {
		p.stop()
		if step == dummyif.BindAddress {
			_, out, _ := runCleanup(t, "--dry-run")
			for _, want := range []string{"local-route 10.96.22.1/32 on kube-ipvs0", "local-route fd00:96::22/128 on kube-ipvs0", "virtual-server TCP 10.96.22.1:80"} {
				if !strings.Contains(out, want) {
					t.Errorf("the cleanup plan lacks %q", want)
				}
			}
		}
		p = startProxy(t, dir, "--vip-binding="+string(step))
		p.waitLog(`msg="sync done" full=true`)
		eventually(t, firstSync, "the VIPs bound by "+string(step), func() bool { return bound(step) })
		stillUp("after the restart to " + string(step))
		if step != dummyif.BindRoute {
			continue
		}
		// Foreign routes, added once the link holds no address (removing a link's last
		// IPv4 address makes the kernel drop every IPv4 route through it).
		onLink := addForeignLocalRoute(t, "kube-ipvs0", "10.96.22.7/32", unix.RTPROT_STATIC, 0)
		sameVIP := addForeignLocalRoute(t, "kube-ipvs0", "10.96.22.1/32", unix.RTPROT_STATIC, 0)
		elsewhere := addForeignLocalRoute(t, "node0", "10.96.22.8/32", dummyif.RouteProtocol, dummyif.RouteMetric)
		// A periodic repair is a stepped cycle ("repair cycle done"), or a full sync when it
		// runs in one go.
		repairsDone := func() int {
			return strings.Count(p.Log(), `msg="repair cycle done"`) + strings.Count(p.Log(), `full=true`)
		}
		repairs := repairsDone()
		eventually(t, firstSync, "two more repairs", func() bool { return repairsDone() >= repairs+2 })
		defer func() {
			for _, r := range []*netlink.Route{onLink, sameVIP, elsewhere} {
				if !routeThere(t, r) {
					t.Errorf("the foreign route %s proto %d through %d was removed", r.Dst, r.Protocol, r.LinkIndex)
				}
			}
		}()
		for _, r := range []*netlink.Route{onLink, sameVIP, elsewhere} {
			if !routeThere(t, r) {
				t.Errorf("a repair removed the foreign route %s proto %d", r.Dst, r.Protocol)
			}
		}
	}
}

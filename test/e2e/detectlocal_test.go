//go:build guest

package e2e

import (
	"net/netip"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/kube-ipvs/kube-ipvs/test/guestutil"
)

// The four detectLocalMode values, in both proxy modes, judged as kube-proxy judges them:
// traffic to a ClusterIP from a local pod keeps its source address, traffic from anything
// else is masqueraded. Each case has a client that is local under the mode and one that is
// not, and the one that is not sits where another mode would call it local (inside the
// cluster CIDR, or on this node's pod CIDR range), so that a mode which fell back to another
// fails. The backend reports the source address it saw.
func TestDetectLocalModes(t *testing.T) {
	for _, mode := range []string{"ipvs", "iptables"} {
		for _, c := range detectLocalCases {
			t.Run(mode+"/"+c.name, func(t *testing.T) { testDetectLocal(t, mode, c) })
		}
	}
}

type detectLocalCase struct {
	name string
	// flags are the proxy's; podCIDRs are the Node object's spec.podCIDRs.
	flags    []string
	podCIDRs []string
	// local and remote are the two clients' addresses; bridged puts the local one's host
	// veth into the bridge dlbr0 (the BridgeInterface case).
	local, remote string
	bridged       bool
}

var detectLocalCases = []detectLocalCase{
	{name: "ClusterCIDR", flags: []string{"--cluster-cidr", "10.244.0.0/16"},
		local: "10.244.9.61", remote: "198.18.0.61"},
	// The remote client is inside the cluster CIDR, on another node's pod range.
	{name: "NodeCIDR", flags: []string{"--detect-local-mode", "NodeCIDR", "--cluster-cidr", "10.244.0.0/16"},
		podCIDRs: []string{"10.244.9.0/24"}, local: "10.244.9.62", remote: "10.244.10.62"},
	// Both clients are in the same range: only the interface tells them apart. The local
	// client's host veth is "vdlp", the remote one's "vdlo".
	{name: "InterfaceNamePrefix", flags: []string{"--detect-local-mode", "InterfaceNamePrefix", "--pod-interface-name-prefix", "vdlp"},
		local: "10.244.9.63", remote: "10.244.9.64"},
	{name: "BridgeInterface", flags: []string{"--detect-local-mode", "BridgeInterface", "--pod-bridge-interface", "dlbr0"},
		local: "10.244.9.65", remote: "10.244.9.66", bridged: true},
}

func testDetectLocal(t *testing.T, mode string, c detectLocalCase) {
	dir := setupNode(t)
	if c.podCIDRs != nil {
		writeManifests(t, dir, "node.yaml", nodeYAML(c.podCIDRs, nil))
	}
	back := guestutil.NewPod(t, "dlb", netip.MustParseAddr("10.244.60.11"))
	back.ServeTCPWho(t, 8080, "dlb")
	local := client(t, "dlp", c.local)
	remote := client(t, "dlo", c.remote)
	if c.bridged {
		joinBridge(t, "dlbr0", local)
	}
	writeManifests(t, dir, "svc.yaml",
		serviceYAML(svcOpts{name: "web", clusterIP: "10.96.60.1", port: 80, targetPort: 8080}),
		sliceYAML("web", "web-1", "TCP", 8080, "", eps("10.244.60.11")...))
	t.Cleanup(func() { runCleanup(t, "--force") }) // runs after the proxy stopped
	startProxy(t, dir, append([]string{"--mode", mode}, c.flags...)...)
	eventually(t, firstSync, "the ClusterIP to answer", func() bool {
		_, err := local.AskTCP(netip.MustParseAddrPort("10.96.60.1:80"))
		return err == nil
	})
	if _, src := who(t, local, "10.96.60.1:80"); src != c.local {
		t.Errorf("the local pod %s reached the ClusterIP as %s: masqueraded, want its own address", c.local, src)
	}
	if _, src := who(t, remote, "10.96.60.1:80"); src == c.remote {
		t.Errorf("the non-local client %s reached the ClusterIP with its own address: not masqueraded", c.remote)
	}
}

// nodeYAML is the test node's Node object with the given spec.podCIDRs and InternalIPs.
func nodeYAML(podCIDRs, internalIPs []string) string {
	doc := "apiVersion: v1\nkind: Node\nmetadata:\n  name: " + nodeName + "\n  labels: {topology.kubernetes.io/zone: zone-a}\n"
	if len(podCIDRs) > 0 {
		doc += "spec:\n  podCIDR: " + podCIDRs[0] + "\n  podCIDRs:\n"
		for _, c := range podCIDRs {
			doc += "  - " + c + "\n"
		}
	}
	if len(internalIPs) > 0 {
		doc += "status:\n  addresses:\n"
		for _, a := range internalIPs {
			doc += "  - {type: InternalIP, address: " + a + "}\n"
		}
	}
	return doc
}

// joinBridge puts the pod's host veth into the bridge name (made if missing, removed when
// the test ends), as a bridge CNI plugin does: the node reaches the pod through the bridge,
// and the pod's packets arrive on it.
func joinBridge(t *testing.T, name string, p *guestutil.Pod) {
	t.Helper()
	br, err := netlink.LinkByName(name)
	if err != nil {
		if err := netlink.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: name}}); err != nil {
			t.Fatalf("bridge %s: %v (is the bridge module in the guest?)", name, err)
		}
		if br, err = netlink.LinkByName(name); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = netlink.LinkDel(br) })
		gw, _ := netlink.ParseAddr("169.254.1.1/32")
		if err := netlink.AddrAdd(br, gw); err != nil {
			t.Fatalf("bridge %s: gateway address: %v", name, err)
		}
		if err := netlink.LinkSetUp(br); err != nil {
			t.Fatal(err)
		}
	}
	veth, err := netlink.LinkByName(p.HostVeth)
	if err != nil {
		t.Fatal(err)
	}
	if err := netlink.LinkSetMaster(veth, br); err != nil {
		t.Fatalf("%s into %s: %v", p.HostVeth, name, err)
	}
	for _, a := range p.Addrs {
		dst, _ := netlink.ParseIPNet(netip.PrefixFrom(a, a.BitLen()).String())
		if err := netlink.RouteReplace(&netlink.Route{LinkIndex: br.Attrs().Index, Dst: dst, Scope: netlink.SCOPE_LINK}); err != nil {
			t.Fatalf("route to %s through %s: %v", a, name, err)
		}
	}
}

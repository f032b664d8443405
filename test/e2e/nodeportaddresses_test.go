//go:build guest

package e2e

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/kube-ipvs/kube-ipvs/test/guestutil"
	"github.com/kube-ipvs/kube-ipvs/test/netnstest"
)

// nodePortAddressesCase is one --nodeport-addresses value (kube-proxy's nodePortAddresses)
// and the node addresses that must, and must not, answer on the node port.
type nodePortAddressesCase struct {
	value      string
	serve, not []string
}

// The node has three addresses: the Node object's InternalIP (nodeIP, on node0) and two
// more on node1, one in 10.0.0.0/8 and one outside it. kube-proxy gives a NodePort to the
// addresses its nodePortAddresses selects: "primary" is the Node's InternalIPs, a CIDR the
// node addresses inside it, "all" every address, combined as a union.
var nodePortAddressesCases = []nodePortAddressesCase{
	{value: "primary,10.0.0.0/8", serve: []string{nodeIP, "10.1.0.5"}, not: []string{"192.168.77.5"}},
	{value: "primary", serve: []string{nodeIP}, not: []string{"10.1.0.5", "192.168.77.5"}},
	{value: "192.168.77.0/24,10.1.0.0/16", serve: []string{"10.1.0.5", "192.168.77.5"}, not: []string{nodeIP}},
	{value: "all", serve: []string{nodeIP, "10.1.0.5", "192.168.77.5"}},
}

// nodePortAddresses: in both proxy modes, an outside client reaches the node port on the
// addresses the value selects and on no other; in the IPVS mode ipvsadm shows a virtual
// server for exactly those (kube-proxy's IPVS mode makes one per selected node address).
func TestNodePortAddressesCombinations(t *testing.T) {
	for _, mode := range []string{"ipvs", "iptables"} {
		for _, c := range nodePortAddressesCases {
			t.Run(mode+"/"+strings.ReplaceAll(c.value, "/", "_"), func(t *testing.T) { testNodePortAddresses(t, mode, c) })
		}
	}
}

func testNodePortAddresses(t *testing.T, mode string, c nodePortAddressesCase) {
	dir := setupNode(t)
	netnstest.Run(t, "ip", "link", "add", "node1", "type", "dummy")
	t.Cleanup(func() { netnstest.Run(t, "ip", "link", "del", "node1") })
	netnstest.Run(t, "ip", "addr", "add", "10.1.0.5/24", "dev", "node1")
	netnstest.Run(t, "ip", "addr", "add", "192.168.77.5/24", "dev", "node1")
	netnstest.Run(t, "ip", "link", "set", "node1", "up")
	writeManifests(t, dir, "node.yaml", nodeYAML(nil, []string{nodeIP}))
	back := guestutil.NewPod(t, "npb", netip.MustParseAddr("10.244.70.11"))
	back.ServeTCP(t, 8080, "npb")
	outside := client(t, "npo", "198.18.0.70")
	writeManifests(t, dir, "svc.yaml",
		serviceYAML(svcOpts{name: "np", typ: "NodePort", clusterIP: "10.96.70.1", port: 80, targetPort: 8080, nodePort: 30170}),
		sliceYAML("np", "np-1", "TCP", 8080, "", eps("10.244.70.11")...))
	t.Cleanup(func() { runCleanup(t, "--force") }) // runs after the proxy stopped
	startProxy(t, dir, "--mode", mode, "--cluster-cidr", "10.244.0.0/16", "--nodeport-addresses", c.value)
	first := c.serve[0] + ":30170"
	eventually(t, firstSync, "the node port on "+first, func() bool {
		_, err := outside.AskTCP(netip.MustParseAddrPort(first))
		return err == nil
	})

	for _, a := range c.serve {
		wantAnswer(t, outside, a+":30170", "npb")
	}
	for _, a := range c.not {
		if got, err := outside.AskTCP(netip.MustParseAddrPort(a + ":30170")); err == nil {
			t.Errorf("%s:30170 answered %q: --nodeport-addresses=%s does not select it", a, got, c.value)
		}
	}
	if mode != "ipvs" {
		return
	}
	table := ipvsadm(t)
	for _, a := range c.serve {
		if realServers(blockOf(table, "TCP", a+":30170")) != 1 {
			t.Errorf("no virtual server %s:30170 with its backend:\n%s", a, table)
		}
	}
	for _, a := range c.not {
		if strings.Contains(table, a+":30170") {
			t.Errorf("a virtual server %s:30170 that --nodeport-addresses=%s does not select:\n%s", a, c.value, table)
		}
	}
}

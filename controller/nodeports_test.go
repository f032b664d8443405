package controller

import (
	"net/netip"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

// nodePort IPs as kube-proxy 1.37's nodePortAddresses gives them: primary (the Node's
// InternalIPs, one family replaced by --bind-address) and CIDRs over the host's addresses,
// combined.
func TestNodePortIPsPrimaryCIDRsAndBindAddress(t *testing.T) {
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	_ = idx.Add(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
		{Type: corev1.NodeInternalIP, Address: "192.168.1.10"},
		{Type: corev1.NodeInternalIP, Address: "fd00::10"},
		{Type: corev1.NodeExternalIP, Address: "203.0.113.10"},
	}}})
	host := []netip.Addr{netip.MustParseAddr("192.168.1.10"), netip.MustParseAddr("10.1.2.3"), netip.MustParseAddr("10.9.0.1"),
		netip.MustParseAddr("fd00::10"), netip.MustParseAddr("127.0.0.1")}
	addrs := func(s ...string) []netip.Addr {
		var out []netip.Addr
		for _, a := range s {
			out = append(out, netip.MustParseAddr(a))
		}
		return out
	}
	for _, tc := range []struct {
		name string
		cfg  Config
		want []netip.Addr
	}{
		{"primary", Config{NodePortPrimary: true}, addrs("192.168.1.10", "fd00::10")},
		{"primary and a CIDR", Config{NodePortPrimary: true, NodePortAddresses: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16")}},
			addrs("10.1.2.3", "192.168.1.10", "fd00::10")},
		{"primary with bindAddress", Config{NodePortPrimary: true, PrimaryNodeIP: netip.MustParseAddr("10.9.0.1")}, addrs("10.9.0.1", "fd00::10")},
		{"CIDRs alone", Config{NodePortAddresses: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}, addrs("10.1.2.3", "10.9.0.1")},
		{"all", Config{}, addrs("10.1.2.3", "10.9.0.1", "192.168.1.10", "fd00::10")},
	} {
		c := &Controller{cfg: tc.cfg}
		c.cfg.NodeName = "n1"
		c.src.nodes = corelisters.NewNodeLister(idx)
		if err := c.refreshNodeWith(host, nil); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(c.node.nodeIPs, tc.want) {
			t.Errorf("%s: node port IPs %v, want %v", tc.name, c.node.nodeIPs, tc.want)
		}
	}
}

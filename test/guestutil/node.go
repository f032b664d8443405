package guestutil

import (
	"net/netip"
	"testing"

	"github.com/kube-ipvs/kube-ipvs/test/netnstest"
)

// NodeLink is the dummy link that holds a test node's own addresses (EnterNode).
const NodeLink = "node0"

// EnterNode moves the test into a network namespace of its own (netnstest.EnterNew) that
// stands in for a node: loopback up, IPv4 forwarding on (and IPv6 forwarding when an
// address is IPv6), and the node's addresses on the dummy link NodeLink, which is up.
// Pods (NewPod) created afterwards are joined to this namespace.
func EnterNode(t testing.TB, addrs ...netip.Addr) {
	t.Helper()
	RequireGuest(t)
	netnstest.EnterNew(t)
	netnstest.Run(t, "ip", "link", "set", "lo", "up")
	WriteSysctl(t, "net.ipv4.ip_forward", "1")
	netnstest.Run(t, "ip", "link", "add", NodeLink, "type", "dummy")
	for _, a := range addrs {
		if a.Is4() {
			netnstest.Run(t, "ip", "addr", "add", a.String()+"/32", "dev", NodeLink)
			continue
		}
		WriteSysctl(t, "net.ipv6.conf.all.forwarding", "1")
		netnstest.Run(t, "ip", "-6", "addr", "add", a.String()+"/128", "dev", NodeLink, "nodad")
	}
	netnstest.Run(t, "ip", "link", "set", NodeLink, "up")
}

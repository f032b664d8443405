//go:build guest

package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netns"

	"github.com/kube-ipvs/kube-ipvs/test/guestutil"
	"github.com/kube-ipvs/kube-ipvs/test/netnstest"
)

// The two-node cluster: the guest's own namespace is the network between the nodes (a
// router, as the top-of-rack switch of a routed CNI would be), each node is a namespace of
// its own with its own kube-ipvs, IPVS table, iptables and ipsets, and an outside client
// sits in a third namespace behind the router.
const (
	clusterCIDR = "10.244.0.0/16"
	outsideIP   = "192.168.53.100"
)

// simNode is one node of the two-node cluster.
type simNode struct {
	name   string
	ns     netns.NsHandle
	ip     netip.Addr
	podNet string // the node's pod CIDR, routed to it by the router
}

// within runs f in the node's network namespace.
func (n *simNode) within(f func() error) error { return guestutil.InNamespace(n.ns, f) }

// self is the node's own namespace as a client: what a node process or a hostNetwork pod
// would use.
func (n *simNode) self() *guestutil.Pod { return &guestutil.Pod{Name: n.name, NS: n.ns} }

// pod starts a pod on the node.
func (n *simNode) pod(t *testing.T, name, ip string) *guestutil.Pod {
	t.Helper()
	var p *guestutil.Pod
	_ = n.within(func() error {
		p = guestutil.NewPod(t, name, netip.MustParseAddr(ip))
		return nil
	})
	return p
}

// ipvsTable is the node's `ipvsadm -Ln`.
func (n *simNode) ipvsTable(t *testing.T) string {
	t.Helper()
	return guestutil.RunIn(t, n.ns, "ipvsadm", "-Ln")
}

// twoNodes is the cluster: nodes A and B and the outside client.
type twoNodes struct {
	a, b    *simNode
	outside *guestutil.Pod
}

// newTwoNodes builds the cluster's network: each node on its own /24 toward the router
// (192.168.5x.1), pod CIDRs 10.244.1.0/24 (A) and 10.244.2.0/24 (B) routed by the router to
// their node, and the outside client on 192.168.53.0/24.
func newTwoNodes(t *testing.T) *twoNodes {
	t.Helper()
	guestutil.RequireGuest(t)
	guestutil.WriteSysctl(t, "net.ipv4.ip_forward", "1")
	c := &twoNodes{}
	for i, name := range []string{"node-a", "node-b"} {
		n := &simNode{name: name, ns: guestutil.NewNamespace(t), ip: netip.MustParseAddr(fmt.Sprintf("192.168.5%d.10", i+1)),
			podNet: fmt.Sprintf("10.244.%d.0/24", i+1)}
		guestutil.Wire(t, n.ns, "r"+name[len(name)-1:], netip.MustParsePrefix(fmt.Sprintf("192.168.5%d.1/24", i+1)), netip.PrefixFrom(n.ip, 24))
		netnstest.Run(t, "ip", "route", "add", n.podNet, "via", n.ip.String())
		_ = n.within(func() error {
			guestutil.WriteSysctl(t, "net.ipv4.ip_forward", "1")
			return nil
		})
		if i == 0 {
			c.a = n
		} else {
			c.b = n
		}
	}
	ns := guestutil.NewNamespace(t)
	guestutil.Wire(t, ns, "rout", netip.MustParsePrefix("192.168.53.1/24"), netip.MustParsePrefix(outsideIP+"/24"))
	c.outside = &guestutil.Pod{Name: "outside", NS: ns}
	return c
}

// routeTo makes the router send traffic for addr (a load-balancer or external IP) to node n,
// as a load balancer or an upstream router would.
func (c *twoNodes) routeTo(t *testing.T, addr string, n *simNode) {
	t.Helper()
	netnstest.Run(t, "ip", "route", "replace", addr+"/32", "via", n.ip.String())
}

// manifests writes both Nodes into a new manifests folder and returns it.
func (c *twoNodes) manifests(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	var docs []string
	for _, n := range []*simNode{c.a, c.b} {
		docs = append(docs, "apiVersion: v1\nkind: Node\nmetadata:\n  name: "+n.name)
	}
	writeManifests(t, dir, "nodes.yaml", docs...)
	return dir
}

// start runs kube-ipvs on both nodes, each in its namespace, on the same manifests.
func (c *twoNodes) start(t *testing.T, dir string) {
	t.Helper()
	for _, n := range []*simNode{c.a, c.b} {
		// One after the other: two first starts at once, both loading kernel modules, have
		// each hung in modprobe for the whole first-sync limit.
		startProxyAs(t, n.name, n.within, dir, "--cluster-cidr", clusterCIDR).waitLog(`sync done`)
	}
}

// askWho asks addr from client and returns the answering backend's name and the client address
// it saw (ServeTCPWho), or an error when nothing answered.
func askWho(client *guestutil.Pod, addr string) (name, source string, err error) {
	reply, err := client.AskTCP(netip.MustParseAddrPort(addr))
	if err != nil {
		return "", "", err
	}
	name, source, _ = strings.Cut(reply, " ")
	return name, source, nil
}

// wantAnswers asks addr n times from client and fails unless every request is answered, by
// every backend in wantNames at least once, each seeing wantSource as the client address.
func wantAnswers(t *testing.T, client *guestutil.Pod, addr, wantSource string, n int, wantNames ...string) {
	t.Helper()
	seen := map[string]int{}
	for i := 0; i < n; i++ {
		name, src, err := askWho(client, addr)
		if err != nil {
			t.Errorf("%s -> %s: request %d not answered: %v", client.Name, addr, i, err)
			return
		}
		if src != wantSource {
			t.Errorf("%s -> %s: backend %s saw client %s, want %s", client.Name, addr, name, src, wantSource)
		}
		seen[name]++
	}
	for _, w := range wantNames {
		if seen[w] == 0 {
			t.Errorf("%s -> %s: answers %v, none from %s", client.Name, addr, seen, w)
		}
	}
}

// wantNoAnswer fails if anything answers a request from client to addr.
func wantNoAnswer(t *testing.T, client *guestutil.Pod, addr, why string) {
	t.Helper()
	if name, src, err := askWho(client, addr); err == nil {
		t.Errorf("%s -> %s: %s answered (client seen as %s); %s", client.Name, addr, name, src, why)
	}
}

// healthCheck GETs the health-check node port from the outside client.
func (c *twoNodes) healthCheck(t *testing.T, n *simNode, port int) (int, string) {
	t.Helper()
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (conn net.Conn, err error) {
			err = guestutil.InNamespace(c.outside.NS, func() (err error) {
				conn, err = (&net.Dialer{}).DialContext(ctx, network, addr)
				return err
			})
			return conn, err
		}}}
	resp, err := hc.Get(fmt.Sprintf("http://%s:%d/", n.ip, port))
	if err != nil {
		t.Fatalf("health check of %s: %v", n.name, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

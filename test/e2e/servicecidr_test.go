//go:build guest

package e2e

import (
	"errors"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/kube-ipvs/kube-ipvs/test/guestutil"
	"github.com/kube-ipvs/kube-ipvs/test/netnstest"
)

// refusedWithin bounds how long a refusal may take: one round trip to the node, where a
// packet that leaks out waits for the dial's whole timeout.
const refusedWithin = time.Second

// Service CIDRs: a new connection to an address of a Service CIDR that no Service holds is
// refused at once, from a pod and from the node, instead of following the node's route for
// it (here a dummy link that swallows packets, as an uplink toward a router that does not
// know the range does: the client sees a timeout). A ClusterIP keeps working, a port it does
// not expose is refused, and the node's own addresses are never refused, even one inside a
// Service CIDR. A ServiceCIDR object added later (manifests re-read at SIGHUP) applies
// without a restart, and then replaces --service-cidr. In both proxy modes.
func TestServiceCIDRsRefuseUnallocatedAddresses(t *testing.T) {
	for _, mode := range []string{"ipvs", "iptables"} {
		t.Run(mode, func(t *testing.T) { testServiceCIDRs(t, mode) })
	}
}

func testServiceCIDRs(t *testing.T, mode string) {
	dir := setupNode(t)
	leakRoutes(t, "10.96.0.0/16", "10.97.0.0/16")
	// A node address inside the Service CIDR added later: the node's own, never refused.
	netnstest.Run(t, "ip", "addr", "add", "10.97.0.5/32", "dev", "node0")
	guestutil.ServeNode(t, "tcp", "0.0.0.0:9097", "node")
	back := guestutil.NewPod(t, "scb", netip.MustParseAddr("10.244.50.11"))
	back.ServeTCP(t, 8080, "scb")
	cli := client(t, "scc", "10.244.9.50")
	writeManifests(t, dir, "svc.yaml",
		serviceYAML(svcOpts{name: "web", clusterIP: "10.96.50.1", port: 80, targetPort: 8080}),
		sliceYAML("web", "web-1", "TCP", 8080, "", eps("10.244.50.11")...))
	t.Cleanup(func() { runCleanup(t, "--force") }) // runs after the proxy stopped
	p := startProxy(t, dir, "--mode", mode, "--service-cidr", "10.96.0.0/16")
	eventually(t, firstSync, "the ClusterIP to answer", func() bool {
		_, err := cli.AskTCP(netip.MustParseAddrPort("10.96.50.1:80"))
		return err == nil
	})

	// The rules come with the Service (the same repair), so no waiting from here on.
	wantRefused(t, cli, "10.96.50.99:80")
	wantRefused(t, nil, "10.96.50.98:443")
	wantRefused(t, cli, "10.96.50.1:81") // a ClusterIP's port no Service exposes
	wantAnswer(t, cli, "10.96.50.1:80", "scb")
	wantAnswer(t, nil, "10.96.50.1:80", "scb")
	wantAnswer(t, cli, nodeIP+":9097", "node")
	// Not a Service CIDR yet: the packet follows the node's route and is lost.
	wantLost(t, cli, "10.97.0.77:80")

	writeManifests(t, dir, "cidrs.yaml", serviceCIDRYAML("kubernetes", "10.96.0.0/16"), serviceCIDRYAML("extra", "10.97.0.0/16"))
	p.reload()
	p.waitLog(`Service CIDRs.*cidrs="?\[10\.96\.0\.0/16 10\.97\.0\.0/16\]"? from="ServiceCIDR objects"`)
	eventually(t, 10*time.Second, "10.97.0.77 to be refused", func() bool {
		_, err := dialOnce(cli, "10.97.0.77:80")
		return errors.Is(err, syscall.ECONNREFUSED)
	})
	wantRefused(t, cli, "10.97.0.77:80")
	wantRefused(t, nil, "10.97.3.4:80")
	wantRefused(t, cli, "10.96.50.99:80")
	wantAnswer(t, cli, "10.96.50.1:80", "scb")
	wantAnswer(t, cli, "10.97.0.5:9097", "node")
	wantAnswer(t, nil, "10.97.0.5:9097", "node")
	if p.cmd.ProcessState != nil {
		t.Errorf("the proxy exited: %v", p.cmd.ProcessState)
	}
}

// leakRoutes routes the prefixes to a dummy link, which drops what it is given: without
// the proxy's refusal, a connection there times out.
func leakRoutes(t *testing.T, prefixes ...string) {
	t.Helper()
	link := &netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Name: "leak0"}}
	if err := netlink.LinkAdd(link); err != nil {
		t.Fatalf("leak0: %v", err)
	}
	t.Cleanup(func() { _ = netlink.LinkDel(link) })
	netnstest.Run(t, "ip", "link", "set", "leak0", "up")
	for _, p := range prefixes {
		netnstest.Run(t, "ip", "route", "add", p, "dev", "leak0")
	}
}

func serviceCIDRYAML(name string, cidrs ...string) string {
	doc := "apiVersion: networking.k8s.io/v1\nkind: ServiceCIDR\nmetadata: {name: " + name + "}\nspec:\n  cidrs:\n"
	for _, c := range cidrs {
		doc += "  - " + c + "\n"
	}
	return doc
}

// dialOnce connects to addr from the pod (nil: from the node) with a one-second timeout
// (twice refusedWithin), closes at once, and says how it went and how long it took.
func dialOnce(from *guestutil.Pod, addr string) (time.Duration, error) {
	start := time.Now()
	dial := func() error {
		c, err := net.DialTimeout("tcp", addr, 2*refusedWithin)
		if err == nil {
			c.Close()
		}
		return err
	}
	var err error
	if from == nil {
		err = dial()
	} else {
		err = from.Do(dial)
	}
	return time.Since(start), err
}

func wantRefused(t *testing.T, from *guestutil.Pod, addr string) {
	t.Helper()
	took, err := dialOnce(from, addr)
	if !errors.Is(err, syscall.ECONNREFUSED) || took > refusedWithin {
		t.Errorf("%s to %s: %v after %s, want connection refused within %s", clientName(from), addr, err, took.Round(time.Millisecond), refusedWithin)
	}
}

func wantLost(t *testing.T, from *guestutil.Pod, addr string) {
	t.Helper()
	took, err := dialOnce(from, addr)
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Errorf("%s to %s: %v after %s, want a timeout (the packet leaves by the node's route)", clientName(from), addr, err, took.Round(time.Millisecond))
	}
}

func wantAnswer(t *testing.T, from *guestutil.Pod, addr, name string) {
	t.Helper()
	ask := guestutil.AskTCP
	if from != nil {
		ask = from.AskTCP
	}
	if got, err := ask(netip.MustParseAddrPort(addr)); err != nil || got != name {
		t.Errorf("%s to %s: answer %q, %v; want %q", clientName(from), addr, got, err, name)
	}
}

func clientName(p *guestutil.Pod) string {
	if p == nil {
		return "the node"
	}
	return "pod " + p.Name
}

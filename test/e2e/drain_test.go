//go:build guest

package e2e

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/kube-ipvs/kube-ipvs/test/guestutil"
)

// drainSetup starts a Service whose only endpoint (gt1) gets one long-lived connection, then
// swaps the endpoint for gt2: gt1 must drain.
func drainSetup(t *testing.T, vip string, extra ...string) (*proxyProc, *guestutil.Pod, *guestutil.Conn, func(...ep)) {
	dir := setupNode(t)
	backends(t, "gt", 11, 2)
	cli := client(t, "gtc", "10.244.9.11")
	svc := serviceYAML(svcOpts{name: "web", clusterIP: vip, port: 80, targetPort: 8080})
	set := func(e ...ep) {
		writeManifests(t, dir, "svc.yaml", svc, sliceYAML("web", "web-1", "TCP", 8080, "", e...))
	}
	set(eps("10.244.11.11")...)
	p := startProxy(t, dir, extra...)
	eventually(t, firstSync, "the virtual server", func() bool { return realServers(vsBlock(t, "TCP", vip+":80")) == 1 })
	conn, err := cli.DialTCP(netip.MustParseAddrPort(vip + ":80"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if conn.First != "gt1" {
		t.Fatalf("the only endpoint is gt1, answered %q", conn.First)
	}
	set(eps("10.244.11.12")...)
	p.reload()
	eventually(t, 10*time.Second, "gt1 to drain at weight 0 and gt2 to serve", func() bool {
		w := weights(vsBlock(t, "TCP", vip+":80"))
		return w["10.244.11.11:8080"] == "0" && w["10.244.11.12:8080"] == "1"
	})
	return p, cli, conn, set
}

// A removed endpoint's open connection keeps working while new connections go elsewhere;
// the real server disappears once that connection is gone.
func TestRemovedEndpointDrainsThenDisappears(t *testing.T) {
	vip := "10.96.110.1"
	_, cli, conn, _ := drainSetup(t, vip, "--graceful-termination-timeout", "5m")
	if name, err := conn.Ask(); err != nil || name != "gt1" {
		t.Fatalf("the open connection to the removed endpoint answered %q, %v", name, err)
	}
	if got := ask(t, cli, vip+":80", 4); got["gt2"] != 4 {
		t.Fatalf("new connections while gt1 drains: %v, want all on gt2", got)
	}
	if w := weights(vsBlock(t, "TCP", vip+":80")); w["10.244.11.11:8080"] != "0" {
		t.Fatalf("gt1 was deleted while its connection was open: %v", w)
	}
	// Closed with a reset, the connection leaves no TIME_WAIT: IPVS forgets it within its
	// 10 s CLOSE timeout, and then the drain ends long before the 5 minute limit.
	conn.Reset()
	eventually(t, 25*time.Second, "gt1 to be deleted once its connection is gone", func() bool {
		_, still := weights(vsBlock(t, "TCP", vip+":80"))["10.244.11.11:8080"]
		return !still
	})
}

// A connection held open does not keep a drain going past --graceful-termination-timeout.
func TestDrainEndsAtTheTimeout(t *testing.T) {
	vip := "10.96.110.2"
	_, _, conn, _ := drainSetup(t, vip, "--graceful-termination-timeout", "4s")
	start := time.Now()
	eventually(t, 15*time.Second, "gt1 to be deleted at the drain timeout", func() bool {
		_, still := weights(vsBlock(t, "TCP", vip+":80"))["10.244.11.11:8080"]
		return !still
	})
	if took := time.Since(start); took < 2*time.Second {
		t.Errorf("gt1 was deleted after %s, before the 4 s timeout, with its connection open", took)
	}
	_ = conn
}

// kill -9 mid-drain: the new process keeps the real server at weight 0 (kubernetes #92019:
// kube-proxy reset it to 1) and removes it when drained.
func TestRestartMidDrainKeepsDraining(t *testing.T) {
	vip := "10.96.110.3"
	p, cli, conn, _ := drainSetup(t, vip, "--graceful-termination-timeout", "5m")
	p.kill9()
	p2 := startProxy(t, p.cmd.Args[3], "--graceful-termination-timeout", "5m")
	m := p2.waitLog(`msg="sync done" full=true services=\d+ (ipvs_writes=\d+ addr_writes=\d+ ipset_writes=\d+ iptables_restores=\d+)`)
	if m[1] != "ipvs_writes=0 addr_writes=0 ipset_writes=0 iptables_restores=0" {
		t.Errorf("first sync after restart: %s, want all 0", m[1])
	}
	if w := weights(vsBlock(t, "TCP", vip+":80")); w["10.244.11.11:8080"] != "0" || w["10.244.11.12:8080"] != "1" {
		t.Fatalf("after the restart: %v, want gt1 still at weight 0", w)
	}
	if got := ask(t, cli, vip+":80", 2); got["gt2"] != 2 {
		t.Errorf("new connections after the restart: %v", got)
	}
	if name, err := conn.Ask(); err != nil || name != "gt1" {
		t.Errorf("the draining connection after the restart answered %q, %v", name, err)
	}
	conn.Reset()
	eventually(t, 25*time.Second, "gt1 to be deleted once drained", func() bool {
		_, still := weights(vsBlock(t, "TCP", vip+":80"))["10.244.11.11:8080"]
		return !still
	})
}

// An endpoint that comes back while draining gets its weight back.
func TestEndpointBackWhileDrainingGetsWeightBack(t *testing.T) {
	vip := "10.96.110.4"
	p, _, _, set := drainSetup(t, vip, "--graceful-termination-timeout", "5m")
	set(eps("10.244.11.11", "10.244.11.12")...)
	p.reload()
	eventually(t, 10*time.Second, "gt1 back at weight 1", func() bool {
		w := weights(vsBlock(t, "TCP", vip+":80"))
		return w["10.244.11.11:8080"] == "1" && w["10.244.11.12:8080"] == "1"
	})
}

// A UDP client whose backend was removed reaches another backend with its next datagram,
// from the same socket (same source port).
func TestUDPClientMovesToAnotherBackend(t *testing.T) {
	dir := setupNode(t)
	backends(t, "ud", 12, 2)
	cli := client(t, "udc", "10.244.9.12")
	svc := serviceYAML(svcOpts{name: "dns", clusterIP: "10.96.120.1", proto: "UDP", port: 53, targetPort: 5353})
	writeManifests(t, dir, "svc.yaml", svc, sliceYAML("dns", "dns-1", "UDP", 5353, "", eps("10.244.12.11")...))
	p := startProxy(t, dir)
	eventually(t, firstSync, "the UDP virtual server", func() bool { return realServers(vsBlock(t, "UDP", "10.96.120.1:53")) == 1 })
	sock, err := cli.DialUDP(netip.MustParseAddrPort("10.96.120.1:53"))
	if err != nil {
		t.Fatal(err)
	}
	defer sock.Close()
	if name, err := sock.Ask(); err != nil || name != "ud1" {
		t.Fatalf("first datagram answered %q, %v", name, err)
	}
	writeManifests(t, dir, "svc.yaml", svc, sliceYAML("dns", "dns-1", "UDP", 5353, "", eps("10.244.12.12")...))
	p.reload()
	eventually(t, 10*time.Second, "ud1 to be removed at once (UDP does not drain)", func() bool {
		w := weights(vsBlock(t, "UDP", "10.96.120.1:53"))
		_, old := w["10.244.12.11:5353"]
		return !old && w["10.244.12.12:5353"] == "1"
	})
	// The kernel expires the client's IPVS connection to ud1 on its own (expire_nodest_conn,
	// which the proxy sets, queues the expiry when the real server goes), but a moment
	// later: a datagram sent in between meets the dead connection and is dropped. Without
	// the sysctl the entry would stay for the UDP timeout (5 minutes) and every datagram
	// would be dropped until then.
	eventually(t, 10*time.Second, "the IPVS connection to ud1 to expire", func() bool {
		return !strings.Contains(ipvsadm(t, "-c"), "10.244.12.11:5353")
	})
	if name, err := sock.Ask(); err != nil || name != "ud2" {
		t.Errorf("the next datagram from the same socket answered %q, %v; want ud2", name, err)
	}
}

//go:build guest

package e2e

import (
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/kube-ipvs/kube-ipvs/sysctl"
	"github.com/kube-ipvs/kube-ipvs/test/guestutil"
)

// A client that reuses its source port while IPVS still holds its previous connection:
// net.ipv4.vs.conn_reuse_mode=1, the kernel's default, balances the new connection anew; 0
// sends it to the old connection's real server. kube-ipvs sets 0 only on 4.1-5.8, which
// drop such a connection's first SYN for a second under 1 (kubernetes #70747); from 5.9 on
// it leaves the kernel's 1. On the kernel the guest runs, the test asserts that choice's
// outcome: the mode as chosen, every reused port balanced anew with no SYN sent twice
// (5.9+), and 0 pinning it to one real server.
func TestReusedSourcePortIsBalancedAnew(t *testing.T) {
	const vip = "10.96.117.1:80"
	dir := setupNode(t)
	guestutil.WriteSysctl(t, "net.ipv4.vs.conn_reuse_mode", "1")
	backends(t, "cr", 37, 2)
	cli := client(t, "crc", "10.244.9.17")
	writeManifests(t, dir, "svc.yaml",
		serviceYAML(svcOpts{name: "reuse", clusterIP: "10.96.117.1", port: 80, targetPort: 8080}),
		sliceYAML("reuse", "reuse-1", "TCP", 8080, "", eps("10.244.37.11", "10.244.37.12")...))
	p := startProxy(t, dir)
	eventually(t, firstSync, "the virtual server", func() bool { return realServers(vsBlock(t, "TCP", vip)) == 2 })
	p.waitLog(`msg="sync done"`)

	rel := guestutil.KernelRelease(t)
	stalls := sysctl.ConnReuseModeStalls(rel)
	want := map[bool]string{true: "0", false: "1"}[stalls]
	if got := readSysctl(t, "net.ipv4.vs.conn_reuse_mode"); got != want {
		t.Fatalf("kernel %s: conn_reuse_mode = %s after the start, want %s", rel, got, want)
	}
	if !stalls {
		names, retrans := reuseSourcePort(t, cli, 40117, vip, 4)
		if names["cr1"] != 2 || names["cr2"] != 2 {
			t.Errorf("kernel %s, conn_reuse_mode=1: a reused source port was answered by %v, want round robin (2 each)", rel, names)
		}
		if retrans != 0 {
			t.Errorf("kernel %s, conn_reuse_mode=1: %d segments sent again over 4 reused connections, want none (a dropped SYN)", rel, retrans)
		}
		guestutil.WriteSysctl(t, "net.ipv4.vs.conn_reuse_mode", "0")
	}
	if names, _ := reuseSourcePort(t, cli, 40118, vip, 4); len(names) != 1 {
		t.Errorf("kernel %s, conn_reuse_mode=0: a reused source port was answered by %v, want one backend every time", rel, names)
	}
}

// reuseSourcePort connects n times from the same source port, each connection closed with
// a reset (no TIME_WAIT on the client, the IPVS entry left in CLOSE), and counts the
// answering backends and the client's retransmitted segments.
func reuseSourcePort(t *testing.T, cli *guestutil.Pod, port int, to string, n int) (map[string]int, uint32) {
	t.Helper()
	names, retrans := map[string]int{}, uint32(0)
	for i := range n {
		c, err := cli.DialTCPFrom(port, netip.MustParseAddrPort(to))
		if err != nil {
			t.Fatalf("connection %d from port %d to %s: %v", i, port, to, err)
		}
		r, err := c.Retransmits()
		if err != nil {
			t.Fatalf("TCP_INFO: %v", err)
		}
		names[c.First]++
		retrans += r
		if err := c.Reset(); err != nil {
			t.Fatal(err)
		}
	}
	return names, retrans
}

func readSysctl(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile("/proc/sys/" + strings.ReplaceAll(name, ".", "/"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

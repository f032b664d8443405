//go:build guest

package e2e

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kube-ipvs/kube-ipvs/test/guestutil"
)

// Traffic policy Local with endpoints on other nodes only: what a client gets, per mode.
// The endpoint is a live pod here, named by its EndpointSlice as on node-other, so a rule
// that forwarded to it anyway would be answered.
//   - externalTrafficPolicy Local, an outside client on the node port: the IPVS mode's
//     virtual server has no real server and IPVS answers ICMP port unreachable (the client
//     sees a refused connection at once); the iptables fallback drops, as kube-proxy's
//     iptables mode ("has no local endpoints"), and the client times out.
//   - internalTrafficPolicy Local, a pod on the ClusterIP: the same in each mode. The node
//     routes the Service CIDR out, as a real node's default route does (a link that
//     swallows packets), so that a timeout alone proves nothing: the fallback's DROP rule
//     must have counted the packets.
func TestTrafficPolicyLocalWithoutLocalEndpoints(t *testing.T) {
	for _, mode := range []string{"ipvs", "iptables"} {
		t.Run(mode, func(t *testing.T) { testNoLocalEndpoints(t, mode) })
	}
}

func testNoLocalEndpoints(t *testing.T, mode string) {
	dir := setupNode(t)
	leakRoutes(t, "10.96.0.0/16")
	remote := guestutil.NewPod(t, "nlr", netip.MustParseAddr("10.244.80.11"))
	remote.ServeTCP(t, 8080, "nlr")
	pod := client(t, "nlp", "10.244.9.80")
	outside := client(t, "nlo", "198.18.0.80")
	elsewhere := []ep{{ip: "10.244.80.11", node: "node-other"}}
	writeManifests(t, dir, "svc.yaml",
		serviceYAML(svcOpts{name: "etp", typ: "NodePort", clusterIP: "10.96.80.1", port: 80, targetPort: 8080, nodePort: 30180,
			externalLocal: true, healthCheckNodePort: 30181}),
		sliceYAML("etp", "etp-1", "TCP", 8080, "", elsewhere...),
		serviceYAML(svcOpts{name: "itp", clusterIP: "10.96.80.2", port: 80, targetPort: 8080, internalLocal: true}),
		sliceYAML("itp", "itp-1", "TCP", 8080, "", elsewhere...),
		// A Service with a local endpoint tells when the rules are in.
		serviceYAML(svcOpts{name: "ready", clusterIP: "10.96.80.3", port: 80, targetPort: 8080}),
		sliceYAML("ready", "ready-1", "TCP", 8080, "", eps("10.244.80.11")...))
	t.Cleanup(func() { runCleanup(t, "--force") }) // runs after the proxy stopped
	startProxy(t, dir, "--mode", mode, "--cluster-cidr", "10.244.0.0/16")
	eventually(t, firstSync, "the rules", func() bool {
		_, err := pod.AskTCP(netip.MustParseAddrPort("10.96.80.3:80"))
		return err == nil
	})

	// The endpoint is reachable, through the cluster-wide path: a pod on the node port.
	wantAnswer(t, pod, nodeIP+":30180", "nlr")
	for _, c := range []struct {
		what string
		from *guestutil.Pod
		addr string
	}{
		{"an outside client on the externalTrafficPolicy Local node port", outside, nodeIP + ":30180"},
		{"a pod on the internalTrafficPolicy Local ClusterIP", pod, "10.96.80.2:80"},
	} {
		took, icmp, err := dialWatchingICMP(t, c.from, c.addr)
		switch mode {
		case "ipvs":
			if !errors.Is(err, syscall.ECONNREFUSED) || took > refusedWithin || !icmp {
				t.Errorf("%s (%s): %v after %s, ICMP port unreachable %v; want refused at once by ICMP port unreachable",
					c.what, c.addr, err, took.Round(time.Millisecond), icmp)
			}
		default:
			var ne net.Error
			if !errors.As(err, &ne) || !ne.Timeout() || icmp {
				t.Errorf("%s (%s): %v after %s, ICMP port unreachable %v; want the packet dropped (a timeout, no ICMP)",
					c.what, c.addr, err, took.Round(time.Millisecond), icmp)
			}
		}
	}
	if mode == "iptables" {
		for _, svc := range []string{"e2e/etp:p", "e2e/itp:p"} {
			if n := dropped(t, svc); n == 0 {
				t.Errorf("the fallback's %q has no local endpoints DROP rules counted no packet", svc)
			}
		}
	}
}

// dropped sums the packet counters of the filter table's "has no local endpoints" DROP
// rules of the Service port svc ("namespace/name:port").
func dropped(t *testing.T, svc string) int {
	t.Helper()
	total := 0
	for _, line := range strings.Split(mustRun(t, "", "iptables-save", "-c", "-t", "filter"), "\n") {
		if !strings.Contains(line, svc+" ") || !strings.Contains(line, "has no local endpoints") || !strings.HasSuffix(line, "-j DROP") {
			continue
		}
		var pkts, bytes int
		if _, err := fmt.Sscanf(line, "[%d:%d]", &pkts, &bytes); err == nil {
			total += pkts
		}
	}
	return total
}

// dialWatchingICMP dials addr from p as dialOnce does and says whether an ICMP port
// unreachable about that address reached p meanwhile.
func dialWatchingICMP(t *testing.T, p *guestutil.Pod, addr string) (time.Duration, bool, error) {
	t.Helper()
	var pc net.PacketConn
	if err := p.Do(func() (err error) {
		pc, err = net.ListenPacket("ip4:icmp", "0.0.0.0")
		return err
	}); err != nil {
		t.Fatalf("pod %s: ICMP socket: %v", p.Name, err)
	}
	defer pc.Close()
	took, err := dialOnce(p, addr)
	dst := netip.MustParseAddrPort(addr)
	_ = pc.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	buf := make([]byte, 1500)
	for {
		n, _, rerr := pc.ReadFrom(buf)
		if rerr != nil {
			return took, false, err
		}
		if portUnreachableFor(buf[:n], dst) {
			return took, true, err
		}
	}
}

// portUnreachableFor tells whether msg, an ICMP message without its IP header, is a port
// unreachable about a packet sent to dst: the quoted IP header's destination and the quoted
// TCP header's destination port.
func portUnreachableFor(msg []byte, dst netip.AddrPort) bool {
	if len(msg) < 8+20 || msg[0] != 3 || msg[1] != 3 {
		return false
	}
	inner := msg[8:]
	ihl := int(inner[0]&0x0f) * 4
	if len(inner) < ihl+4 {
		return false
	}
	to, _ := netip.AddrFromSlice(inner[16:20])
	port := uint16(inner[ihl+2])<<8 | uint16(inner[ihl+3])
	return to == dst.Addr() && port == dst.Port()
}

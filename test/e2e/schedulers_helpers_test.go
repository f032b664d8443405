//go:build guest

package e2e

import (
	"bufio"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kube-ipvs/kube-ipvs/test/guestutil"
)

// The scheduler tests (docs/schedulers.md) measure where connections land by counts, never
// by timings: each connection's backend is the name it answered with, and the IPVS
// counters a scheduler decides on are polled until they reflect every packet sent so far.

// schedStart bounds the wait for a proxy's first sync in these tests. It is three times the
// harness's firstSync: on a shared machine under heavy load (load average 25 on 2 cores) the
// first iptables-restore in the guest has taken over a minute.
const schedStart = 3 * firstSync

// schedService is a one-port TCP Service (port 80 to target 8080) with a scheduler.
func schedService(name, vip, sched, flags string) string {
	ann := map[string]string{"kube-ipvs.io/scheduler": sched}
	if flags != "" {
		ann["kube-ipvs.io/scheduler-flags"] = flags
	}
	return serviceYAML(svcOpts{name: name, clusterIP: vip, port: 80, targetPort: 8080, annotations: ann})
}

// podIPs returns the first address of each pod.
func podIPs(pods []*guestutil.Pod) []string {
	var ips []string
	for _, p := range pods {
		ips = append(ips, p.IP(4).String())
	}
	return ips
}

// podNames returns the name of each pod.
func podNames(pods []*guestutil.Pod) []string {
	var names []string
	for _, p := range pods {
		names = append(names, p.Name)
	}
	return names
}

// connCounts is one real server's connection counters as the scheduler sees them.
type connCounts struct{ active, inactive int }

// ipvsConns reads the counters of each real server ("10.244.40.11:8080") of vip:80.
func ipvsConns(t *testing.T, vip string) map[string]connCounts {
	t.Helper()
	m := map[string]connCounts{}
	for _, line := range strings.Split(vsBlock(t, "TCP", vip+":80"), "\n") {
		f := strings.Fields(line)
		if len(f) < 6 || f[0] != "->" {
			continue
		}
		a, err1 := strconv.Atoi(f[4])
		in, err2 := strconv.Atoi(f[5])
		if err1 != nil || err2 != nil {
			t.Fatalf("cannot read the counters of %q", line)
		}
		m[f[1]] = connCounts{active: a, inactive: in}
	}
	return m
}

// waitActive waits until vip:80's real servers hold exactly n active connections in all:
// a closed connection counts as active until its FIN has passed IPVS, and the next
// scheduling decision must not see it.
func waitActive(t *testing.T, vip string, n int) {
	t.Helper()
	eventually(t, firstSync, fmt.Sprintf("%s to count %d active connections", vip, n), func() bool {
		sum := 0
		for _, c := range ipvsConns(t, vip) {
			sum += c.active
		}
		return sum == n
	})
}

// heldSet is the long-lived connections a test holds, per answering backend.
type heldSet struct {
	conns  []*guestutil.Conn
	byName map[string]int
}

func newHeldSet(t *testing.T) *heldSet {
	h := &heldSet{byName: map[string]int{}}
	t.Cleanup(func() {
		for _, c := range h.conns {
			c.Reset()
		}
	})
	return h
}

// hold opens a connection from cli to vip:80 and keeps it open until the test ends.
func (h *heldSet) hold(t *testing.T, cli *guestutil.Pod, vip string) *guestutil.Conn {
	t.Helper()
	c, err := cli.DialTCP(netip.MustParseAddrPort(vip + ":80"))
	if err != nil {
		t.Fatalf("holding a connection to %s: %v", vip, err)
	}
	h.conns = append(h.conns, c)
	h.byName[c.First]++
	return c
}

// spread is the largest minus the smallest count over names (a missing name counts 0).
func spread(counts map[string]int, names []string) int {
	lo, hi := -1, 0
	for _, n := range names {
		c := counts[n]
		if lo < 0 || c < lo {
			lo = c
		}
		if c > hi {
			hi = c
		}
	}
	return hi - lo
}

// clientAddrs returns n client addresses 10.244.<subnet>.1..n (n < 255).
func clientAddrs(subnet, n int) []netip.Addr {
	var as []netip.Addr
	for i := 1; i <= n; i++ {
		as = append(as, netip.MustParseAddr(fmt.Sprintf("10.244.%d.%d", subnet, i)))
	}
	return as
}

// fromConn is a connection from one chosen source address, with its reader.
type fromConn struct {
	c *net.TCPConn
	r *bufio.Reader
}

// dialFrom connects from src (an address of pod p) to dst and reads the backend's name.
func dialFrom(p *guestutil.Pod, src netip.Addr, dst netip.AddrPort) (*fromConn, string, error) {
	var c net.Conn
	d := net.Dialer{LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(src, 0)), Timeout: 5 * time.Second}
	if err := p.Do(func() (err error) { c, err = d.Dial("tcp", dst.String()); return err }); err != nil {
		return nil, "", err
	}
	fc := &fromConn{c: c.(*net.TCPConn), r: bufio.NewReader(c)}
	name, err := fc.read()
	if err != nil {
		fc.reset()
		return nil, "", fmt.Errorf("reading the answer from %s: %w", dst, err)
	}
	return fc, name, nil
}

func (fc *fromConn) read() (string, error) {
	_ = fc.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, err := fc.r.ReadString('\n')
	return strings.TrimSpace(line), err
}

// ask sends a line and returns the backend's answer.
func (fc *fromConn) ask() (string, error) {
	if _, err := fc.c.Write([]byte("again\n")); err != nil {
		return "", err
	}
	return fc.read()
}

// reset closes the connection with a TCP reset: IPVS then keeps its entry 10 s (CLOSE)
// instead of 2 minutes (TIME_WAIT), so a removed real server finishes draining soon after.
func (fc *fromConn) reset() {
	_ = fc.c.SetLinger(0)
	_ = fc.c.Close()
}

// askFrom connects from src to dst, returns the backend's name and resets the connection.
func askFrom(p *guestutil.Pod, src netip.Addr, dst netip.AddrPort) (string, error) {
	fc, name, err := dialFrom(p, src, dst)
	if err == nil {
		fc.reset()
	}
	return name, err
}

// holdFrom opens a connection from src to vip:80 that stays open until the test ends or
// it is reset; it returns the backend's name.
func holdFrom(t *testing.T, p *guestutil.Pod, src netip.Addr, vip string) (*fromConn, string) {
	t.Helper()
	fc, name, err := dialFrom(p, src, netip.MustParseAddrPort(vip+":80"))
	if err != nil {
		t.Fatalf("holding a connection from %s to %s: %v", src, vip, err)
	}
	t.Cleanup(fc.reset)
	return fc, name
}

// clientMap is the backend each client address reached.
type clientMap map[netip.Addr]string

// mapClients connects once from every address in srcs (all on pod p) to vip:80, a few
// clients at a time, and records which backend answered each.
func mapClients(t *testing.T, p *guestutil.Pod, srcs []netip.Addr, vip string) clientMap {
	t.Helper()
	dst := netip.MustParseAddrPort(vip + ":80")
	out := make(clientMap, len(srcs))
	var mu sync.Mutex
	var wg sync.WaitGroup
	work := make(chan netip.Addr)
	var firstErr error
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for src := range work {
				name, err := askFrom(p, src, dst)
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = fmt.Errorf("client %s to %s: %w", src, dst, err)
				}
				out[src] = name
				mu.Unlock()
			}
		}()
	}
	for _, s := range srcs {
		work <- s
	}
	close(work)
	wg.Wait()
	if firstErr != nil {
		t.Fatal(firstErr)
	}
	return out
}

// movedClients counts the clients whose backend differs between two maps.
func movedClients(before, after clientMap) int {
	n := 0
	for c, b := range before {
		if after[c] != b {
			n++
		}
	}
	return n
}

// perBackend counts the clients of each backend.
func (m clientMap) perBackend() map[string]int {
	out := map[string]int{}
	for _, b := range m {
		out[b]++
	}
	return out
}

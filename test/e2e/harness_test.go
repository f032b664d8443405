//go:build guest

package e2e

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/kube-ipvs/kube-ipvs/test/guestutil"
	"github.com/kube-ipvs/kube-ipvs/test/netnstest"
)

const (
	binary   = "/usr/local/bin/kube-ipvs"
	nodeName = "node-e2e"
	// nodeIP is this node's address for NodePort Services (a TEST-NET-3 address on a dummy
	// link: the guest has no network card).
	nodeIP = "203.0.113.10"
	// firstSync bounds the wait for what the proxy's first full sync programs. It takes a
	// second or two on an idle machine; the guest is emulated, and on a shared 2-core
	// machine its first iptables and ipset calls have taken over 20 seconds.
	firstSync = 60 * time.Second
)

// proxyProc is one running kube-ipvs.
type proxyProc struct {
	t   *testing.T
	cmd *exec.Cmd
	mu  sync.Mutex
	log bytes.Buffer
}

func (p *proxyProc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.Write(b)
}

// Log returns everything the proxy logged so far.
func (p *proxyProc) Log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

// startProxy runs kube-ipvs on the manifests in dir, with short sync periods so repairs are
// quick to observe. It is killed when the test ends, and its log is shown if the test failed.
func startProxy(t *testing.T, dir string, extra ...string) *proxyProc {
	t.Helper()
	return startProxyAs(t, nodeName, func(f func() error) error { return f() }, dir, extra...)
}

// startProxyAs is startProxy for the node named node, started by within (which runs the
// start in the node's network namespace, say).
func startProxyAs(t *testing.T, node string, within func(func() error) error, dir string, extra ...string) *proxyProc {
	t.Helper()
	args := append([]string{"run", "--manifests", dir, "--hostname-override", node,
		"--sync-period", "2s", "--min-sync-period", "50ms", "--log-level", "debug"}, extra...)
	p := &proxyProc{t: t, cmd: exec.Command(binary, args...)}
	p.cmd.Stdout, p.cmd.Stderr = p, p
	if err := within(p.cmd.Start); err != nil {
		t.Fatalf("start kube-ipvs: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			p.quit()
		}
		p.stop()
		if t.Failed() {
			t.Logf("kube-ipvs log:\n%s", p.Log())
		}
	})
	return p
}

func (p *proxyProc) stop() {
	if p.cmd.ProcessState == nil {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = p.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = p.cmd.Process.Kill()
			<-done
		}
	}
}

// quit ends a proxy that is still running with SIGQUIT, on which the Go runtime writes
// every goroutine's stack to the log: a failed test then shows where the proxy was.
func (p *proxyProc) quit() {
	if p.cmd.ProcessState != nil || p.cmd.Process.Signal(syscall.SIGQUIT) != nil {
		return
	}
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
	}
}

// kill9 kills the proxy the hard way, as a crash or OOM kill would.
func (p *proxyProc) kill9() {
	_ = p.cmd.Process.Kill()
	_ = p.cmd.Wait()
}

// reload makes the proxy re-read its manifests.
func (p *proxyProc) reload() {
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		p.t.Fatalf("SIGHUP: %v", err)
	}
}

// waitLog waits until the log matches re and returns the first match.
func (p *proxyProc) waitLog(re string) []string {
	p.t.Helper()
	rx := regexp.MustCompile(re)
	var m []string
	eventually(p.t, firstSync, "kube-ipvs to log "+re, func() bool {
		m = rx.FindStringSubmatch(p.Log())
		return m != nil
	})
	return m
}

// eventually polls cond every 50 ms until it holds or the limit passes.
func eventually(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", limit, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// writeManifests writes YAML documents into dir/name.
func writeManifests(t *testing.T, dir, name string, docs ...string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(strings.Join(docs, "\n---\n")), 0o644); err != nil {
		t.Fatal(err)
	}
}

// setupNode prepares the guest's root namespace as a node: forwarding on, a node IP, and a
// clean IPVS table and kube-ipvs0 when the test ends.
func setupNode(t *testing.T) string {
	t.Helper()
	guestutil.RequireGuest(t)
	guestutil.WriteSysctl(t, "net.ipv4.ip_forward", "1")
	guestutil.WriteSysctl(t, "net.ipv6.conf.all.forwarding", "1")
	link := &netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Name: "node0"}}
	if err := netlink.LinkAdd(link); err != nil {
		t.Fatalf("node0: %v", err)
	}
	l, _ := netlink.LinkByName("node0")
	if err := netlink.AddrAdd(l, &netlink.Addr{IPNet: &net.IPNet{IP: net.ParseIP(nodeIP), Mask: net.CIDRMask(24, 32)}}); err != nil {
		t.Fatal(err)
	}
	if err := netlink.LinkSetUp(l); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = netlink.LinkDel(l)
		_ = exec.Command("ipvsadm", "-C").Run()
		if k, err := netlink.LinkByName("kube-ipvs0"); err == nil {
			_ = netlink.LinkDel(k)
		}
	})
	dir := t.TempDir()
	writeManifests(t, dir, "node.yaml", `apiVersion: v1
kind: Node
metadata:
  name: `+nodeName+`
  labels: {topology.kubernetes.io/zone: zone-a}`)
	return dir
}

// ipvsadm returns `ipvsadm -Ln` (plus args).
func ipvsadm(t *testing.T, args ...string) string {
	t.Helper()
	return netnstest.Run(t, "ipvsadm", append([]string{"-Ln"}, args...)...)
}

// vsLines returns the ipvsadm block of one virtual server ("TCP  10.96.0.1:80 rr" and its
// real servers), or "" if absent.
func vsBlock(t *testing.T, proto, addrPort string) string {
	t.Helper()
	return blockOf(ipvsadm(t), proto, addrPort)
}

// blockOf is vsBlock of an ipvsadm -Ln output.
func blockOf(table, proto, addrPort string) string {
	var block []string
	in := false
	for _, line := range strings.Split(table, "\n") {
		if !strings.HasPrefix(line, "  ->") {
			in = strings.HasPrefix(line, fmt.Sprintf("%-5s%s ", proto, addrPort))
		}
		if in {
			block = append(block, line)
		}
	}
	return strings.Join(block, "\n")
}

// realServers counts the "->" lines of a virtual server block.
func realServers(block string) int {
	return strings.Count(block, "  -> ")
}

// weights maps each real server ("10.244.1.11:8080") of a virtual server block to its weight.
func weights(block string) map[string]string {
	m := map[string]string{}
	for _, line := range strings.Split(block, "\n") {
		f := strings.Fields(line)
		if len(f) >= 4 && f[0] == "->" {
			m[f[1]] = f[3]
		}
	}
	return m
}

// activeReals counts the real servers with a weight above 0 (not draining).
func activeReals(block string) int {
	n := 0
	for _, w := range weights(block) {
		if w != "0" {
			n++
		}
	}
	return n
}

// dummyAddrs lists kube-ipvs0's addresses.
func dummyAddrs(t *testing.T) map[string]bool {
	t.Helper()
	m := map[string]bool{}
	l, err := netlink.LinkByName("kube-ipvs0")
	if err != nil {
		return m
	}
	as := guestutil.AddrList(t, l)
	for _, a := range as {
		m[a.IP.String()] = true
	}
	return m
}

// ask sends n TCP requests from a pod and counts the answering names.
func ask(t *testing.T, from *guestutil.Pod, to string, n int) map[string]int {
	t.Helper()
	ap := netip.MustParseAddrPort(to)
	got := map[string]int{}
	for i := 0; i < n; i++ {
		name, err := from.AskTCP(ap)
		if err != nil {
			t.Fatalf("request %d from %s to %s: %v", i, from.Name, to, err)
		}
		got[name]++
	}
	return got
}

// askUDP sends n datagrams (each from a new socket) and counts the answering names.
func askUDP(t *testing.T, from *guestutil.Pod, to string, n int) map[string]int {
	t.Helper()
	ap := netip.MustParseAddrPort(to)
	got := map[string]int{}
	for i := 0; i < n; i++ {
		name, err := from.AskUDP(ap)
		if err != nil {
			t.Fatalf("datagram %d from %s to %s: %v", i, from.Name, to, err)
		}
		got[name]++
	}
	return got
}

// backends starts n server pods named prefix-1..n on 10.244.<subnet>.1x, serving TCP 8080
// and UDP 5353, and returns them.
func backends(t *testing.T, prefix string, subnet, n int) []*guestutil.Pod {
	t.Helper()
	var pods []*guestutil.Pod
	for i := 1; i <= n; i++ {
		name := fmt.Sprintf("%s%d", prefix, i)
		p := guestutil.NewPod(t, name, netip.MustParseAddr(fmt.Sprintf("10.244.%d.%d", subnet, 10+i)))
		p.ServeTCP(t, 8080, name)
		p.ServeUDP(t, 5353, name)
		pods = append(pods, p)
	}
	return pods
}

// client starts a client pod.
func client(t *testing.T, name, ip string) *guestutil.Pod {
	t.Helper()
	return guestutil.NewPod(t, name, netip.MustParseAddr(ip))
}

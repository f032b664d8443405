//go:build guest

package e2e

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kube-ipvs/kube-ipvs/test/guestutil"
)

// fastCheck is a TCP or HTTP health check that decides within a few seconds: every second,
// out after 2 failures, back after 1 pass.
func fastCheck(kind string) map[string]string {
	return map[string]string{
		"kube-ipvs.io/health-check":                     kind,
		"kube-ipvs.io/health-check-interval":            "1s",
		"kube-ipvs.io/health-check-timeout":             "300ms",
		"kube-ipvs.io/health-check-unhealthy-threshold": "2",
		"kube-ipvs.io/health-check-healthy-threshold":   "1",
	}
}

// checkDeadline bounds the wait for a verdict to reach the kernel: thresholds × interval
// plus the timeout, a sync, and room for a loaded, emulated guest.
const checkDeadline = 20 * time.Second

// dropNewConnections makes the pod drop every new TCP connection to port (SYNs), as a hung
// process would, while established connections keep flowing. It returns the undo.
func dropNewConnections(t *testing.T, p *guestutil.Pod, port int) func() {
	t.Helper()
	rule := []string{"INPUT", "-p", "tcp", "--dport", fmt.Sprint(port), "--syn", "-j", "DROP"}
	run := func(op string) error {
		return p.Do(func() error {
			out, err := exec.Command("iptables", append([]string{"-w", op}, rule...)...).CombinedOutput()
			if err != nil {
				return fmt.Errorf("iptables %s in %s: %v: %s", op, p.Name, err, out)
			}
			return nil
		})
	}
	if err := run("-A"); err != nil {
		t.Fatal(err)
	}
	undone := false
	undo := func() {
		if !undone {
			undone = true
			if err := run("-D"); err != nil {
				t.Error(err)
			}
		}
	}
	t.Cleanup(undo)
	return undo
}

// dialTo opens connections from cli to vip until one reaches the backend named want (round
// robin gets there within a few).
func dialTo(t *testing.T, cli *guestutil.Pod, vip, want string) *guestutil.Conn {
	t.Helper()
	for range 10 {
		c, err := cli.DialTCP(netip.MustParseAddrPort(vip))
		if err != nil {
			t.Fatal(err)
		}
		if c.First == want {
			t.Cleanup(func() { c.Close() })
			return c
		}
		c.Close()
	}
	t.Fatalf("no connection to %s reached %s", vip, want)
	return nil
}

// checkedTCPService starts n backends prefix1.. in 10.244.subnet.0/24, a TCP-checked
// Service on 10.96.(100+subnet).1:80 and the proxy, waits until every backend is a real
// server at weight 1 and opens a connection to the first backend through the Service.
func checkedTCPService(t *testing.T, prefix string, subnet, n int) checkedSvc {
	t.Helper()
	dir := setupNode(t)
	pods := backends(t, prefix, subnet, n)
	cli := client(t, prefix+"c", fmt.Sprintf("10.244.9.%d", subnet))
	var ips []string
	for i := 1; i <= n; i++ {
		ips = append(ips, fmt.Sprintf("10.244.%d.%d", subnet, 10+i))
	}
	vip := fmt.Sprintf("10.96.%d.1", 100+subnet)
	writeManifests(t, dir, "svc.yaml",
		serviceYAML(svcOpts{name: "web", clusterIP: vip, port: 80, targetPort: 8080, annotations: fastCheck("tcp")}),
		sliceYAML("web", "web-1", "TCP", 8080, "", eps(ips...)...))
	p := startProxy(t, dir)
	eventually(t, firstSync, "every backend a real server at weight 1", func() bool { return activeReals(vsBlock(t, "TCP", vip+":80")) == n })
	return checkedSvc{dir: dir, pods: pods, cli: cli, p: p, held: dialTo(t, cli, vip+":80", prefix+"1")}
}

// checkedSvc is what checkedTCPService started.
type checkedSvc struct {
	dir  string
	pods []*guestutil.Pod
	cli  *guestutil.Pod
	p    *proxyProc
	held *guestutil.Conn // to the first backend
}

// A backend that stops accepting connections goes to weight 0 within its thresholds and
// gets no new connections, while a connection it already had keeps working; a restart of
// the proxy keeps it at 0 (no weight 1 before the first verdict); it comes back once it
// accepts again.
func TestHealthCheckTakesOutAHungBackendAndBringsItBack(t *testing.T) {
	vip := "10.96.121.1:80"
	s := checkedTCPService(t, "hc", 21, 3)
	dir, pods, cli, p, held := s.dir, s.pods, s.cli, s.p, s.held

	undrop := dropNewConnections(t, pods[0], 8080)
	start := time.Now()
	eventually(t, checkDeadline, "hc1 at weight 0", func() bool {
		w := weights(vsBlock(t, "TCP", vip))
		return w["10.244.21.11:8080"] == "0" && w["10.244.21.12:8080"] == "1" && w["10.244.21.13:8080"] == "1"
	})
	t.Logf("hc1 went to weight 0 %s after it stopped accepting (2 failures at 1 s)", time.Since(start).Round(100*time.Millisecond))
	if got := ask(t, cli, vip, 6); got["hc1"] != 0 || got["hc2"]+got["hc3"] != 6 {
		t.Fatalf("new connections with hc1 out: %v", got)
	}
	if name, err := held.Ask(); err != nil || name != "hc1" {
		t.Fatalf("the established connection to hc1 answered %q, %v", name, err)
	}
	p.waitLog(`reason=EndpointUnhealthy`)

	p.kill9()
	p2 := startProxy(t, dir)
	m := p2.waitLog(`msg="sync done" full=true services=\d+ (ipvs_writes=\d+)`)
	if m[1] != "ipvs_writes=0" {
		t.Errorf("first sync after the restart: %s, want 0 (hc1 kept at 0, nothing rewritten)", m[1])
	}
	if w := weights(vsBlock(t, "TCP", vip)); w["10.244.21.11:8080"] != "0" {
		t.Fatalf("after the restart hc1 has weight %s, want 0 until a check passes", w["10.244.21.11:8080"])
	}

	undrop()
	eventually(t, checkDeadline, "hc1 back at weight 1", func() bool { return activeReals(vsBlock(t, "TCP", vip)) == 3 })
	if got := ask(t, cli, vip, 6); got["hc1"] == 0 {
		t.Fatalf("new connections after hc1 came back: %v", got)
	}
	if name, err := held.Ask(); err != nil || name != "hc1" {
		t.Fatalf("the connection to hc1 after it came back answered %q, %v", name, err)
	}
}

// When every endpoint fails, all keep their weight and established traffic flows (fail open),
// and the Service is told.
func TestHealthCheckAllDownFailsOpen(t *testing.T) {
	vip := "10.96.122.1:80"
	s := checkedTCPService(t, "fo", 22, 2)
	pods, p, held := s.pods, s.p, s.held
	dropNewConnections(t, pods[0], 8080)
	dropNewConnections(t, pods[1], 8080)
	p.waitLog(`reason=HealthCheckFailOpen`)
	if n := strings.Count(p.Log(), "endpoint fails its health check"); n != 2 {
		t.Errorf("%d endpoints logged as failing, want 2", n)
	}
	if w := weights(vsBlock(t, "TCP", vip)); w["10.244.22.11:8080"] != "1" || w["10.244.22.12:8080"] != "1" {
		t.Fatalf("all endpoints failing: weights %v, want both kept at 1", w)
	}
	if name, err := held.Ask(); err != nil || name != "fo1" {
		t.Fatalf("established connection answered %q, %v", name, err)
	}
}

// httpBackend serves GET /healthz with the status in code, and anything else with its name.
func httpBackend(t *testing.T, name, ip string, code *atomic.Int32) {
	t.Helper()
	pod := guestutil.NewPod(t, name, netip.MustParseAddr(ip))
	var ln net.Listener
	if err := pod.Do(func() (err error) { ln, err = net.Listen("tcp", ":8080"); return err }); err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			w.WriteHeader(int(code.Load()))
			return
		}
		fmt.Fprintln(w, name)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
}

// An HTTP check that gets 500 counts as failed, though the port accepts connections.
func TestHTTPHealthCheck500CountsAsFailed(t *testing.T) {
	dir := setupNode(t)
	var code1, code2 atomic.Int32
	code1.Store(http.StatusOK)
	code2.Store(http.StatusOK)
	httpBackend(t, "ht1", "10.244.23.11", &code1)
	httpBackend(t, "ht2", "10.244.23.12", &code2)
	vip := "10.96.123.1:80"
	writeManifests(t, dir, "svc.yaml",
		serviceYAML(svcOpts{name: "web", clusterIP: "10.96.123.1", port: 80, targetPort: 8080, annotations: fastCheck("http:/healthz")}),
		sliceYAML("web", "web-1", "TCP", 8080, "", eps("10.244.23.11", "10.244.23.12")...))
	startProxy(t, dir)
	eventually(t, firstSync, "two real servers at weight 1", func() bool { return activeReals(vsBlock(t, "TCP", vip)) == 2 })
	code1.Store(http.StatusInternalServerError)
	eventually(t, checkDeadline, "ht1 (answering 500) at weight 0", func() bool {
		w := weights(vsBlock(t, "TCP", vip))
		return w["10.244.23.11:8080"] == "0" && w["10.244.23.12:8080"] == "1"
	})
	code1.Store(http.StatusOK)
	eventually(t, checkDeadline, "ht1 back at weight 1", func() bool { return activeReals(vsBlock(t, "TCP", vip)) == 2 })
}

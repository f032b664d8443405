//go:build guest

package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kube-ipvs/kube-ipvs/introspect"
	"github.com/kube-ipvs/kube-ipvs/test/guestutil"
)

// runTool runs `kube-ipvs args...` and returns its exit status and output.
func runTool(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		t.Fatalf("kube-ipvs %s: %v", strings.Join(args, " "), err)
	}
	return code, out.String(), errb.String()
}

// listJSON runs `kube-ipvs list -o json` (plus args) and decodes it.
func listJSON(t *testing.T, sock string, args ...string) introspect.Listing {
	t.Helper()
	code, out, errOut := runTool(t, append([]string{"list", "-o", "json", "--state-socket", sock}, args...)...)
	if code != 0 {
		t.Fatalf("kube-ipvs list: exit %d\n%s", code, errOut)
	}
	var l introspect.Listing
	if err := json.Unmarshal([]byte(out), &l); err != nil {
		t.Fatalf("list -o json: %v\n%s", err, out)
	}
	return l
}

func listedVS(l introspect.Listing, addr string) *introspect.ListedVS {
	for i := range l.VirtualServers {
		if l.VirtualServers[i].Address == addr {
			return &l.VirtualServers[i]
		}
	}
	return nil
}

func listedReal(vs *introspect.ListedVS, addr string) *introspect.ListedReal {
	if vs == nil {
		return nil
	}
	for i := range vs.Reals {
		if vs.Reals[i].Address == addr {
			return &vs.Reals[i]
		}
	}
	return nil
}

// podSliceYAML is an EndpointSlice of e2e/svc whose endpoints name their pods (targetRef).
func podSliceYAML(svc string, eps map[string]ep) string {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: %s-1\n  namespace: e2e\n  labels: {kubernetes.io/service-name: %s}\naddressType: IPv4\nports:\n- {name: p, protocol: TCP, port: 8080}\nendpoints:\n", svc, svc)
	for pod, e := range eps {
		fmt.Fprintf(&b, "- addresses: [%q]\n  conditions: {ready: %v}\n  nodeName: %s\n  targetRef: {kind: Pod, namespace: e2e, name: %s}\n", e.ip, !e.notReady, nodeName, pod)
	}
	return b.String()
}

// TestListAndExplain: with real traffic through a running proxy, list names every virtual
// and real server, counts a held connection as active and the packets in --stats, marks
// drift made by hand (and not a foreign virtual server), explain says why a not-ready
// endpoint is out and which annotation was rejected, and without a usable state socket
// list still prints the kernel's table.
func TestListAndExplain(t *testing.T) {
	dir := setupNode(t)
	backends(t, "ls", 21, 2)
	cli := client(t, "lsc", "10.244.9.21")
	web := serviceYAML(svcOpts{name: "web", typ: "NodePort", clusterIP: "10.96.121.1", port: 80, targetPort: 8080, nodePort: 30121})
	api := serviceYAML(svcOpts{name: "api", clusterIP: "10.96.121.2", port: 80, targetPort: 8080, annotations: map[string]string{"kube-ipvs.io/scheduler": "fastest"}})
	webEps := map[string]ep{"ls1": {ip: "10.244.21.11"}, "ls2": {ip: "10.244.21.12"}, "ls3": {ip: "10.244.21.13", notReady: true}}
	write := func() {
		writeManifests(t, dir, "svc.yaml", web, podSliceYAML("web", webEps), api, podSliceYAML("api", map[string]ep{"ls1": {ip: "10.244.21.11"}}))
	}
	write()
	sock := filepath.Join(t.TempDir(), "state.sock")
	// A long sync period: the drift made below must stay until list has seen it.
	p := startProxy(t, dir, "--state-socket", sock, "--sync-period", "10m", "--graceful-termination-timeout", "5m")
	eventually(t, firstSync, "both Services programmed", func() bool {
		return realServers(vsBlock(t, "TCP", "10.96.121.1:80")) == 2 && realServers(vsBlock(t, "TCP", "10.96.121.2:80")) == 1
	})

	t.Run("names and an active connection", func(t *testing.T) { listNamesAndConnections(t, sock, cli) })
	t.Run("stats count packets", func(t *testing.T) { listStatsCountPackets(t, sock, cli) })
	t.Run("explain", func(t *testing.T) { explainService(t, sock) })
	t.Run("drift", func(t *testing.T) { listMarksDrift(t, sock) })
	t.Run("broken state socket", func(t *testing.T) { listWithoutState(t) })
	t.Run("draining", func(t *testing.T) {
		listShowsDraining(t, sock, cli, func(pod string) { delete(webEps, pod); write(); p.reload() })
	})
}

// listShowsDraining removes the endpoint a held connection reached: list and explain show
// its real server draining at weight 0 with the time left.
func listShowsDraining(t *testing.T, sock string, cli *guestutil.Pod, remove func(pod string)) {
	conn, err := cli.DialTCP(netip.MustParseAddrPort("10.96.121.1:80"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	held := map[string]string{"ls1": "10.244.21.11:8080", "ls2": "10.244.21.12:8080"}[conn.First]
	remove(conn.First)
	var r *introspect.ListedReal
	eventually(t, 10*time.Second, "the removed endpoint to drain", func() bool {
		r = listedReal(listedVS(listJSON(t, sock), "10.96.121.1:80"), held)
		return r != nil && r.Draining
	})
	if r.Weight != 0 || r.DrainSecondsLeft <= 0 || r.DrainSecondsLeft > 300 || r.ActiveConns != 1 || r.Drift != "" {
		t.Errorf("draining real server: %+v, want weight 0, 0 < time left <= 300 s, the held connection, no drift", *r)
	}
	_, out, _ := runTool(t, "list", "--state-socket", sock, "--vip", "10.96.121.1")
	if !strings.Contains(out, "draining, ") {
		t.Errorf("text output does not show the drain:\n%s", out)
	}
	t.Logf("kube-ipvs list while draining:\n%s", out)
}

func listNamesAndConnections(t *testing.T, sock string, cli *guestutil.Pod) {
	conn, err := cli.DialTCP(netip.MustParseAddrPort("10.96.121.1:80"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	held := map[string]string{"ls1": "10.244.21.11:8080", "ls2": "10.244.21.12:8080"}[conn.First]
	if held == "" {
		t.Fatalf("the held connection reached %q, not a web pod", conn.First)
	}
	var l introspect.Listing
	eventually(t, 10*time.Second, "the held connection to count as active", func() bool {
		l = listJSON(t, sock)
		r := listedReal(listedVS(l, "10.96.121.1:80"), held)
		return r != nil && r.ActiveConns == 1
	})
	vs := listedVS(l, "10.96.121.1:80")
	if vs.Namespace != "e2e" || vs.Service != "web" || vs.PortName != "p" || vs.Kind != "ClusterIP" || vs.Binding != introspect.BoundDummy || vs.Owner != introspect.OwnerProxy {
		t.Errorf("ClusterIP virtual server: %+v", *vs)
	}
	if r := listedReal(vs, held); r.Pod != conn.First || r.Weight != 1 || r.Forward != "Masq" {
		t.Errorf("real server of the held connection: %+v", *r)
	}
	if listedReal(vs, "10.244.21.13:8080") != nil {
		t.Error("the not-ready endpoint is listed as a real server")
	}
	if np := listedVS(l, nodeIP+":30121"); np == nil || np.Kind != "NodePort" || np.Service != "web" || np.Binding != introspect.BoundNodeIP {
		t.Errorf("NodePort virtual server: %+v", np)
	}
	code, out, errOut := runTool(t, "list", "--state-socket", sock, "--service", "e2e/web")
	if code != 0 || !strings.Contains(out, "e2e/web:p") || !strings.Contains(out, "NodePort") || strings.Contains(out, "10.96.121.2") {
		t.Errorf("list --service e2e/web: exit %d\n%s%s", code, out, errOut)
	}
	t.Logf("kube-ipvs list:\n%s", out)
}

func listStatsCountPackets(t *testing.T, sock string, cli *guestutil.Pod) {
	before := listedVS(listJSON(t, sock, "--stats"), "10.96.121.2:80").Stats
	if got := ask(t, cli, "10.96.121.2:80", 3); got["ls1"] != 3 {
		t.Fatalf("api answered %v", got)
	}
	eventually(t, 10*time.Second, "the counters to show the 3 connections", func() bool {
		after := listedVS(listJSON(t, sock, "--stats"), "10.96.121.2:80").Stats
		return after.Conns >= before.Conns+3 && after.PacketsIn >= before.PacketsIn+9 && after.BytesIn > before.BytesIn
	})
	code, out, _ := runTool(t, "list", "--state-socket", sock, "--stats", "--vip", "10.96.121.2")
	if code != 0 || !strings.Contains(out, "InPkts") || !strings.Contains(out, "e2e/api:p") || strings.Contains(out, "10.96.121.1") {
		t.Errorf("list --stats --vip: exit %d\n%s", code, out)
	}
	t.Logf("kube-ipvs list --stats:\n%s", out)
}

func explainService(t *testing.T, sock string) {
	code, out, errOut := runTool(t, "explain", "e2e/web", "--state-socket", sock)
	if code != 0 {
		t.Fatalf("explain: exit %d\n%s", code, errOut)
	}
	for _, want := range []string{"10.244.21.13:8080", "ls3 on " + nodeName, "not chosen: not ready", "bound to kube-ipvs0",
		"KIPVS-CLUSTER-IP 10.96.121.1,tcp:80", "--match-set KIPVS-CLUSTER-IP"} {
		if !strings.Contains(out, want) {
			t.Errorf("explain e2e/web lacks %q:\n%s", want, out)
		}
	}
	t.Logf("kube-ipvs explain e2e/web:\n%s", out)
	code, out, _ = runTool(t, "explain", "e2e/api", "-o", "json", "--state-socket", sock)
	var svc introspect.Service
	if err := json.Unmarshal([]byte(out), &svc); code != 0 || err != nil {
		t.Fatalf("explain -o json: exit %d, %v\n%s", code, err, out)
	}
	if len(svc.Problems) != 1 || svc.Problems[0].Reason != "InvalidScheduler" || !strings.Contains(svc.Problems[0].Message, "fastest") {
		t.Errorf("the rejected annotation: %+v", svc.Problems)
	}
	if code, _, errOut := runTool(t, "explain", "e2e/nope", "--state-socket", sock); code != 1 || !strings.Contains(errOut, "no Service e2e/nope") {
		t.Errorf("unknown Service: exit %d %s", code, errOut)
	}
}

func listMarksDrift(t *testing.T, sock string) {
	mustRun(t, "", "ipvsadm", "-d", "-t", "10.96.121.2:80", "-r", "10.244.21.11:8080")
	mustRun(t, "", "ipvsadm", "-A", "-t", "10.96.121.1:81", "-s", "rr")  // on kube-ipvs0: the proxy's
	mustRun(t, "", "ipvsadm", "-A", "-t", "198.51.100.7:80", "-s", "rr") // nobody's address: foreign
	l := listJSON(t, sock)
	if r := listedReal(listedVS(l, "10.96.121.2:80"), "10.244.21.11:8080"); r == nil || r.Drift != introspect.DriftMissing || r.InKernel {
		t.Errorf("deleted real server: %+v, want marked missing", r)
	}
	if vs := listedVS(l, "10.96.121.1:81"); vs == nil || vs.Drift != introspect.DriftUnexpected || vs.Owner != introspect.OwnerProxy {
		t.Errorf("virtual server on a VIP no Service wants: %+v, want marked unexpected", vs)
	}
	if vs := listedVS(l, "198.51.100.7:80"); vs == nil || vs.Drift != "" || vs.Owner != introspect.OwnerForeign {
		t.Errorf("foreign virtual server: %+v, want listed, foreign and unmarked", vs)
	}
	if vs := listedVS(l, "10.96.121.1:80"); vs.Drift != "" || listedReal(vs, "10.244.21.11:8080").Drift != "" {
		t.Errorf("an intact virtual server is marked: %+v", vs)
	}
	_, out, _ := runTool(t, "list", "--state-socket", sock)
	if !strings.Contains(out, "! missing") || !strings.Contains(out, "! unexpected") {
		t.Errorf("text output lacks the drift marks:\n%s", out)
	}
	t.Logf("kube-ipvs list with drift:\n%s", out)
}

// listWithoutState: an absent socket and one that answers garbage each give a clear error
// and exit 3, and the kernel's table is still printed, without names.
func listWithoutState(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.sock")
	l, err := net.Listen("unix", bad)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("{not json")) }),
		ReadHeaderTimeout: time.Second}
	go func() { _ = srv.Serve(l) }()
	defer srv.Close()
	for sock, why := range map[string]string{"/run/kube-ipvs/absent.sock": "unreachable", bad: "malformed"} {
		code, out, errOut := runTool(t, "list", "--state-socket", sock)
		if code != 3 || !strings.Contains(errOut, why) || !strings.Contains(errOut, sock) {
			t.Errorf("%s: exit %d, stderr %q; want 3 and an error saying %q", sock, code, errOut, why)
		}
		if !strings.Contains(out, "10.96.121.1:80") || !strings.Contains(out, "10.244.21.11:8080") || strings.Contains(out, "e2e/web") {
			t.Errorf("%s: the kernel table without names is not printed:\n%s", sock, out)
		}
	}
}

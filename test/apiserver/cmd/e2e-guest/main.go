// Command e2e-guest is the guest side of `make e2e`. It runs inside the QEMU guest, whose
// only ways out are forwards to the host's API server and control listener: it starts
// kube-ipvs against the real API server with the kubeconfig that holds only kube-ipvs's
// ServiceAccount token, drives Services and EndpointSlices through the API with the test's
// admin credential, and checks with ipvsadm and real connections between pods (network
// namespaces) that the kernel follows. It asks the host to stop and start the API server
// through the control forward. Exit status 0 means every scenario passed.
package main

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

const (
	nodeName = "node-e2e"
	ns       = "default"
	svcName  = "web"
	ipBin    = "/usr/sbin/ip"
)

// backends are the pods behind the Service: name -> address.
var backends = map[string]string{"be1": "10.244.1.11", "be2": "10.244.1.12", "be3": "10.244.1.13"}

const clientPod, clientIP = "client", "10.244.0.2"

func main() {
	kc := flag.String("kubeconfig", "", "the test's admin kubeconfig")
	pkc := flag.String("proxy-kubeconfig", "", "kube-ipvs's kubeconfig (its ServiceAccount token only)")
	ctl := flag.String("control", "", "the host's control listener (host:port)")
	flag.Parse()
	g := &guest{control: *ctl, proxyKubeconfig: *pkc}
	code := 0
	func() {
		defer func() {
			if r := recover(); r != nil {
				if _, ok := r.(failure); !ok {
					panic(r)
				}
				code = 1
			}
		}()
		g.run(*kc)
	}()
	g.cleanup(code != 0)
	// The same scenarios run on several kernels (GUEST_KERNEL): the verdict names this one.
	kernel := "kernel (unknown)"
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		kernel = "kernel " + strings.TrimSpace(string(b))
	}
	if code == 0 {
		fmt.Println("e2e: PASS all scenarios on " + kernel)
	} else {
		fmt.Println("e2e: FAIL on " + kernel)
	}
	os.Exit(code)
}

type failure struct{}

func fatalf(format string, a ...any) {
	fmt.Printf("e2e: FAIL: "+format+"\n", a...)
	panic(failure{})
}

func pass(format string, a ...any) { fmt.Printf("e2e: PASS "+format+"\n", a...) }
func info(format string, a ...any) { fmt.Printf("e2e: "+format+"\n", a...) }

type guest struct {
	cs              kubernetes.Interface
	ctx             context.Context
	control         string
	proxyKubeconfig string
	proxy           *exec.Cmd
	proxyExited     chan struct{}
	proxyLog        syncBuffer
	servers         []*exec.Cmd
	vip             string
	// restartLog is the part of proxyLog written while the API server was restarting
	// (from its stop to the first change applied after its start), as [from, to) offsets.
	restartLog [2]int
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func (s *syncBuffer) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Len()
}

// eventually polls cond every 100 ms until it holds, or fails the run after limit.
func eventually(limit time.Duration, what string, cond func() bool) {
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			fatalf("timed out after %s waiting for %s", limit, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func sh(name string, args ...string) string {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

func (g *guest) run(kubeconfig string) {
	g.ctx = context.Background()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		fatalf("admin kubeconfig: %v", err)
	}
	cfg.Timeout = 10 * time.Second
	g.cs = kubernetes.NewForConfigOrDie(cfg)
	var ver string
	eventually(60*time.Second, "the API server through the forward", func() bool {
		v, err := g.cs.Discovery().ServerVersion()
		if err == nil {
			ver = v.GitVersion
		}
		return err == nil
	})
	info("guest reaches kube-apiserver %s at %s", ver, cfg.Host)

	g.pods()
	if _, err := g.cs.CoreV1().Nodes().Create(g.ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name: nodeName, Labels: map[string]string{"kubernetes.io/hostname": nodeName},
	}}, metav1.CreateOptions{}); err != nil {
		fatalf("create Node: %v", err)
	}
	g.startProxy()

	g.scenarioService()
	g.scenarioScale()
	g.scenarioMetrics()
	g.scenarioScheduler()
	g.scenarioInvalidScheduler()
	g.scenarioAPIServerRestart()
	g.scenarioDelete()
	g.scenarioServiceCIDR()
	g.checkRBAC()
}

// pods creates the client and backend pods (network namespaces routed as Calico does) and
// starts a kipvs-echo server in each backend.
func (g *guest) pods() {
	if err := os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0o644); err != nil {
		fatalf("ip_forward: %v", err)
	}
	mk := func(name, ip string) {
		v := "v" + name
		sh(ipBin, "netns", "add", name)
		sh(ipBin, "link", "add", v, "type", "veth", "peer", "name", "eth0", "netns", name)
		sh(ipBin, "addr", "add", "169.254.1.1/32", "dev", v)
		sh(ipBin, "link", "set", v, "up")
		sh(ipBin, "route", "add", ip+"/32", "dev", v)
		sh(ipBin, "-n", name, "link", "set", "lo", "up")
		sh(ipBin, "-n", name, "addr", "add", ip+"/32", "dev", "eth0")
		sh(ipBin, "-n", name, "link", "set", "eth0", "up")
		sh(ipBin, "-n", name, "route", "add", "169.254.1.1", "dev", "eth0", "scope", "link")
		sh(ipBin, "-n", name, "route", "add", "default", "via", "169.254.1.1", "dev", "eth0")
	}
	mk(clientPod, clientIP)
	for _, name := range sortedKeys(backends) {
		mk(name, backends[name])
		srv := exec.Command(ipBin, "netns", "exec", name, "kipvs-echo", "serve", "--name", name, "--tcp", "8080")
		if err := srv.Start(); err != nil {
			fatalf("start %s: %v", name, err)
		}
		g.servers = append(g.servers, srv)
		addr := backends[name] + ":8080"
		eventually(10*time.Second, name+" listening", func() bool {
			return exec.Command(ipBin, "netns", "exec", clientPod, "kipvs-echo", "ask", "--timeout", "1s", addr).Run() == nil
		})
	}
	info("pods: client %s; backends be1 be2 be3 serving on :8080", clientIP)
}

func sortedKeys(m map[string]string) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func (g *guest) startProxy() {
	g.proxy = exec.Command("kube-ipvs", "run", "--kubeconfig", g.proxyKubeconfig,
		"--hostname-override", nodeName, "--sync-period", "5s", "--min-sync-period", "100ms",
		"--graceful-termination-timeout", "0s")
	g.proxy.Stdout, g.proxy.Stderr = &g.proxyLog, &g.proxyLog
	if err := g.proxy.Start(); err != nil {
		fatalf("start kube-ipvs: %v", err)
	}
	g.proxyExited = make(chan struct{})
	go func() { _ = g.proxy.Wait(); close(g.proxyExited) }()
	info("kube-ipvs started (pid %d): --kubeconfig %s --hostname-override %s", g.proxy.Process.Pid, g.proxyKubeconfig, nodeName)
}

// --- the kernel's view --------------------------------------------------------------------

func ipvsadm() string { return sh("ipvsadm", "-Ln") }

// vsBlock returns the ipvsadm lines of one TCP virtual server, "" if there is none.
func vsBlock(addrPort string) string {
	var block []string
	in := false
	for _, line := range strings.Split(ipvsadm(), "\n") {
		if !strings.HasPrefix(line, "  ->") {
			in = strings.HasPrefix(line, "TCP  "+addrPort+" ")
		}
		if in {
			block = append(block, line)
		}
	}
	return strings.Join(block, "\n")
}

var rsRe = regexp.MustCompile(`->\s+(\S+):8080\s+Masq\s+(\d+)`)

// realServers returns the real servers of a block with a weight above zero, sorted.
func realServers(block string) []string {
	var rs []string
	for _, m := range rsRe.FindAllStringSubmatch(block, -1) {
		if m[2] != "0" {
			rs = append(rs, m[1])
		}
	}
	sort.Strings(rs)
	return rs
}

func addrs(names ...string) []string {
	var out []string
	for _, n := range names {
		out = append(out, backends[n])
	}
	sort.Strings(out)
	return out
}

func (g *guest) waitRealServers(limit time.Duration, names ...string) string {
	want := strings.Join(addrs(names...), ",")
	var block string
	eventually(limit, fmt.Sprintf("virtual server %s:80 with real servers %s", g.vip, want), func() bool {
		block = vsBlock(g.vip + ":80")
		return block != "" && strings.Join(realServers(block), ",") == want
	})
	return block
}

// traffic makes n connections from the client pod to the Service and returns how many each
// backend answered; every connection must be answered.
func traffic(addr string, n int) map[string]int {
	out, err := exec.Command(ipBin, "netns", "exec", clientPod, "kipvs-echo", "ask", "--count", fmt.Sprint(n), "--timeout", "2s", addr).CombinedOutput()
	if err != nil {
		fatalf("traffic to %s: %v\n%s", addr, err, out)
	}
	counts := map[string]int{}
	for _, l := range strings.Fields(string(out)) {
		counts[l]++
	}
	return counts
}

func expectTraffic(addr string, n int, names ...string) string {
	counts := traffic(addr, n)
	var got []string
	for k := range counts {
		got = append(got, k)
	}
	sort.Strings(got)
	if strings.Join(got, ",") != strings.Join(names, ",") {
		fatalf("traffic to %s reached %v, want exactly %v", addr, counts, names)
	}
	var parts []string
	for _, k := range got {
		parts = append(parts, fmt.Sprintf("%s=%d", k, counts[k]))
	}
	return strings.Join(parts, " ")
}

// --- objects ------------------------------------------------------------------------------

func (g *guest) slice(names ...string) *discoveryv1.EndpointSlice {
	es := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name: svcName + "-e2e", Namespace: ns,
			Labels: map[string]string{discoveryv1.LabelServiceName: svcName, discoveryv1.LabelManagedBy: "kube-ipvs-e2e"},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr("http"), Port: ptr(int32(8080)), Protocol: ptr(corev1.ProtocolTCP)}},
	}
	for _, n := range names {
		es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{backends[n]},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr(true)},
			NodeName:   ptr(nodeName),
		})
	}
	return es
}

func ptr[T any](v T) *T { return &v }

func (g *guest) setEndpoints(names ...string) {
	es := g.slice(names...)
	cur, err := g.cs.DiscoveryV1().EndpointSlices(ns).Get(g.ctx, es.Name, metav1.GetOptions{})
	if err != nil {
		fatalf("get EndpointSlice: %v", err)
	}
	es.ResourceVersion = cur.ResourceVersion
	if _, err := g.cs.DiscoveryV1().EndpointSlices(ns).Update(g.ctx, es, metav1.UpdateOptions{}); err != nil {
		fatalf("update EndpointSlice: %v", err)
	}
}

func (g *guest) annotate(key, value string) {
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, key, value)
	if _, err := g.cs.CoreV1().Services(ns).Patch(g.ctx, svcName, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		fatalf("annotate Service: %v", err)
	}
}

// --- scenarios ----------------------------------------------------------------------------

func (g *guest) scenarioService() {
	svc, err := g.cs.CoreV1().Services(ns).Create(g.ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: svcName, Namespace: ns},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": svcName},
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		fatalf("create Service: %v", err)
	}
	g.vip = svc.Spec.ClusterIP
	if _, err := g.cs.DiscoveryV1().EndpointSlices(ns).Create(g.ctx, g.slice("be1", "be2"), metav1.CreateOptions{}); err != nil {
		fatalf("create EndpointSlice: %v", err)
	}
	t := time.Now()
	block := g.waitRealServers(60*time.Second, "be1", "be2")
	info("ipvsadm after %s:\n%s", time.Since(t).Round(time.Millisecond), block)
	pass("service: Service %s/%s ClusterIP %s + EndpointSlice -> traffic %s", ns, svcName, g.vip, expectTraffic(g.vip+":80", 20, "be1", "be2"))
}

func (g *guest) scenarioScale() {
	g.setEndpoints("be1", "be2", "be3")
	g.waitRealServers(30*time.Second, "be1", "be2", "be3")
	pass("scale up to 3 endpoints: traffic %s", expectTraffic(g.vip+":80", 30, "be1", "be2", "be3"))
	g.setEndpoints("be3")
	g.waitRealServers(30*time.Second, "be3")
	pass("scale down to 1 endpoint: traffic %s", expectTraffic(g.vip+":80", 10, "be3"))
}

func (g *guest) waitScheduler(s string) string {
	var first string
	eventually(30*time.Second, "scheduler "+s+" on "+g.vip+":80", func() bool {
		first, _, _ = strings.Cut(vsBlock(g.vip+":80"), "\n")
		return strings.Fields(first + " x x x")[2] == s
	})
	return strings.TrimSpace(first)
}

func (g *guest) scenarioScheduler() {
	g.annotate("kube-ipvs.io/scheduler", "wlc")
	line := g.waitScheduler("wlc")
	pass("scheduler annotation wlc: ipvsadm shows %q; traffic %s", line, expectTraffic(g.vip+":80", 5, "be3"))
}

func (g *guest) scenarioInvalidScheduler() {
	g.annotate("kube-ipvs.io/scheduler", "bogus")
	var ev corev1.Event
	eventually(30*time.Second, "a Warning Event for Service "+svcName, func() bool {
		l, err := g.cs.CoreV1().Events(ns).List(g.ctx, metav1.ListOptions{
			FieldSelector: "involvedObject.kind=Service,involvedObject.name=" + svcName + ",type=Warning",
		})
		if err != nil || len(l.Items) == 0 {
			return false
		}
		ev = l.Items[0]
		return true
	})
	line := g.waitScheduler("rr")
	pass("invalid scheduler: the API returns Event %s %s from %q: %s; ipvsadm falls back to %q", ev.Type, ev.Reason, ev.Source.Component, ev.Message, line)
}

// ask sends one command to the host's control listener and returns its answer.
func (g *guest) ask(cmd string) string {
	c, err := net.DialTimeout("tcp", g.control, 10*time.Second)
	if err != nil {
		fatalf("control %s: %v", g.control, err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(240 * time.Second))
	fmt.Fprintln(c, cmd)
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "ok") {
		fatalf("control %s: %q %v", cmd, line, err)
	}
	return strings.TrimSpace(line)
}

func (g *guest) scenarioAPIServerRestart() {
	g.setEndpoints("be1")
	g.waitRealServers(30*time.Second, "be1")
	g.restartLog[0] = g.proxyLog.Len()
	info("host: %s", g.ask("stop-apiserver"))
	if _, err := g.cs.Discovery().ServerVersion(); err == nil {
		fatalf("the API server still answers after stop-apiserver")
	}
	if g.exited() {
		fatalf("kube-ipvs exited while the API server was down")
	}
	// The kernel keeps carrying traffic with the rules it has, several times over while down.
	var parts []string
	for range 3 {
		parts = append(parts, expectTraffic(g.vip+":80", 10, "be1"))
	}
	pass("API server down: existing rules keep carrying traffic: %s", strings.Join(parts, "; "))
	info("host: %s", g.ask("start-apiserver"))
	t := time.Now()
	g.setEndpoints("be2", "be3")
	g.waitRealServers(120*time.Second, "be2", "be3")
	g.restartLog[1] = g.proxyLog.Len()
	pass("API server back: a change made after it returned applied in %s (watch recovered); traffic %s",
		time.Since(t).Round(time.Millisecond), expectTraffic(g.vip+":80", 20, "be2", "be3"))
}

func (g *guest) scenarioDelete() {
	if err := g.cs.CoreV1().Services(ns).Delete(g.ctx, svcName, metav1.DeleteOptions{}); err != nil {
		fatalf("delete Service: %v", err)
	}
	eventually(30*time.Second, "virtual server "+g.vip+":80 to go", func() bool {
		return vsBlock(g.vip+":80") == "" && !strings.Contains(sh(ipBin, "addr", "show", "dev", "kube-ipvs0"), " "+g.vip+"/32")
	})
	pass("delete Service: virtual server %s:80 and its address on kube-ipvs0 are gone", g.vip)
	if err := g.cs.DiscoveryV1().EndpointSlices(ns).Delete(g.ctx, svcName+"-e2e", metav1.DeleteOptions{}); err != nil {
		fatalf("delete EndpointSlice: %v", err)
	}
}

// checkRBAC: kube-ipvs ran on nothing but its ServiceAccount token and deploy/rbac.yaml's
// ClusterRole; it watched (every scenario above) and recorded Events, and the API server
// refused it nothing.
//
// A restarting API server may refuse requests until its authorizer has loaded the RBAC
// objects, so what kube-ipvs logged during the restart is not held against the ClusterRole;
// a role that is really short is refused at the start too, outside that window.
func (g *guest) checkRBAC() {
	full := g.proxyLog.String()
	from, to := g.restartLog[0], g.restartLog[1]
	if to < from || to > len(full) {
		from, to = 0, 0
	}
	log := full[:from] + full[to:]
	for _, bad := range []string{"forbidden", "Forbidden", "Unauthorized"} {
		if strings.Contains(log, bad) {
			fatalf("kube-ipvs's log mentions %q: deploy/rbac.yaml is not enough:\n%s", bad, full)
		}
	}
	if n := strings.Count(full[from:to], "forbidden"); n > 0 {
		info("%d forbidden lines while the API server restarted (its authorizer was starting), not counted", n)
	}
	if g.exited() {
		fatalf("kube-ipvs exited early")
	}
	pass("rbac: kube-ipvs ran on its ServiceAccount token alone (deploy/rbac.yaml): listed, watched, created Events; no forbidden/unauthorized in %d log lines", strings.Count(log, "\n"))
}

func (g *guest) exited() bool {
	select {
	case <-g.proxyExited:
		return true
	default:
		return false
	}
}

func (g *guest) cleanup(failed bool) {
	if g.proxyExited != nil {
		_ = g.proxy.Process.Signal(syscall.SIGTERM)
		select {
		case <-g.proxyExited:
		case <-time.After(10 * time.Second):
			_ = g.proxy.Process.Kill()
			<-g.proxyExited
		}
	}
	if failed {
		fmt.Printf("e2e: kube-ipvs log:\n%s\n", g.proxyLog.String())
		if out, err := exec.Command("ipvsadm", "-Ln").CombinedOutput(); err == nil {
			fmt.Printf("e2e: ipvsadm -Ln:\n%s", out)
		}
	}
	for _, s := range g.servers {
		_ = s.Process.Kill()
		_ = s.Wait()
	}
}

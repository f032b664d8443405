package main

import (
	"context"
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func parseIP(s string) net.IP { return net.ParseIP(s) }

// answers is what `kipvs-echo ask --summary` printed: answers per backend name and the client
// addresses the backends saw.
type answers struct {
	byName  map[string]int
	clients map[string]bool
	failed  int
}

func parseSummary(out string) (answers, error) {
	a := answers{byName: map[string]int{}, clients: map[string]bool{}}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		// A summary line is "NAME COUNT" or "NAME CLIENT COUNT"; anything else (a failed
		// request's report, kubectl's "command terminated with exit code 1") is not one.
		f := strings.Fields(line)
		if len(f) < 2 || len(f) > 3 {
			continue
		}
		n, err := strconv.Atoi(f[len(f)-1])
		if err != nil {
			continue
		}
		if f[0] == "(failed)" {
			a.failed += n
			continue
		}
		a.byName[f[0]] += n
		if len(f) == 3 {
			a.clients[f[1]] = true
		}
	}
	if len(a.byName) == 0 && a.failed == 0 {
		return a, fmt.Errorf("no answers in %q", out)
	}
	return a, nil
}

// allEcho checks that every echo Pod, and nothing else, answered and no request failed.
func (c *checker) allEcho(what, out string) (answers, error) {
	a, err := parseSummary(out)
	if err != nil {
		return a, fmt.Errorf("%s: %w", what, err)
	}
	var missing, strangers []string
	for name := range c.echoPods {
		if a.byName[name] == 0 {
			missing = append(missing, name)
		}
	}
	for name := range a.byName {
		if _, ok := c.echoPods[name]; !ok {
			strangers = append(strangers, name)
		}
	}
	if len(missing) > 0 || len(strangers) > 0 || a.failed > 0 {
		return a, fmt.Errorf("%s: no answer from %v, answers from others %v, %d failed:\n%s", what, missing, strangers, a.failed, out)
	}
	return a, nil
}

func (a answers) String() string {
	var s []string
	for n, k := range a.byName {
		s = append(s, fmt.Sprintf("%s %d", n, k))
	}
	sort.Strings(s)
	return strings.Join(s, ", ")
}

// startLoop starts a request loop in the client Pod: count requests through target, 100 ms
// apart, each allowed 2 s, watching for times the client itself was not running. It returns
// once the loop runs (kubectl exec takes about a second) with a function that waits for the
// loop's summary.
func (c *checker) startLoop(ctx context.Context, count int, target string) func() (string, error) {
	done := make(chan struct{})
	var out string
	var err error
	go func() {
		defer close(done)
		out, _, err = c.h.kubectl(ctx, "exec", "client", "--", "kipvs-echo", "ask", "--summary",
			"--count", strconv.Itoa(count), "--interval", "100ms", "--timeout", "2s", "--stalls", target)
	}()
	time.Sleep(3 * time.Second)
	return func() (string, error) {
		<-done
		return out, err
	}
}

// ask runs kipvs-echo ask in Pod pod.
func (c *checker) ask(ctx context.Context, pod string, count int, target string) (string, time.Duration, error) {
	return c.h.kubectl(ctx, "exec", pod, "--", "kipvs-echo", "ask", "--summary", "--count", strconv.Itoa(count), target)
}

func (c *checker) podProxyAndLogs(ctx context.Context) (string, error) {
	var name string
	for n := range c.echoPods {
		name = n
		break
	}
	t := time.Now()
	body, err := c.cs.CoreV1().Pods("default").ProxyGet("http", name, "8080", "/", nil).DoRaw(ctx)
	if err != nil {
		return "", fmt.Errorf("pod proxy GET %s:8080/: %w", name, err)
	}
	got := strings.TrimSpace(string(body))
	if !strings.HasPrefix(got, name+" ") {
		return "", fmt.Errorf("pod proxy GET %s:8080/ answered %q", name, got)
	}
	dProxy := time.Since(t)
	if _, _, err := c.h.kubectl(ctx, "logs", name); err != nil {
		return "", err
	}
	return fmt.Sprintf("GET %s:8080/ answered %q in %s; kubectl logs worked", name, got, dProxy.Round(time.Millisecond)), nil
}

// clusterIP: the client Pod reaches every echo Pod through the ClusterIP, with its own
// address (traffic from a pod of the cluster CIDR is not masqueraded).
func (c *checker) clusterIP(ctx context.Context) (string, error) {
	out, d, err := c.ask(ctx, "client", 30, c.echoIP+":9000")
	if err != nil {
		return "", err
	}
	a, err := c.allEcho("ClusterIP", out)
	if err != nil {
		return "", err
	}
	client, err := c.cs.CoreV1().Pods("default").Get(ctx, "client", metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	if len(a.clients) != 1 || !a.clients[client.Status.PodIP] {
		return "", fmt.Errorf("the backends saw clients %v, want the client Pod's own %s", a.clients, client.Status.PodIP)
	}
	return fmt.Sprintf("30 connections to %s:9000: %s; source %s kept (kubectl exec %s)", c.echoIP, a, client.Status.PodIP, d.Round(time.Millisecond)), nil
}

func (c *checker) dnsName(ctx context.Context) (string, error) {
	var res []string
	for _, name := range []string{"echo.default.svc.cluster.local", "echo"} {
		out, _, err := c.ask(ctx, "client", 30, name+":9000")
		if err != nil {
			return "", err
		}
		a, err := c.allEcho(name, out)
		if err != nil {
			return "", err
		}
		res = append(res, fmt.Sprintf("%s:9000: %s", name, a))
	}
	return strings.Join(res, "; "), nil
}

// nodePortFromNode asks the NodePort on the node's own address from the node-client Pod
// (hostNetwork: the node's own network namespace).
func (c *checker) nodePortFromNode(ctx context.Context) (string, error) {
	p, err := c.cs.CoreV1().Pods("default").Get(ctx, "node-client", metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	target := p.Status.HostIP + ":30900"
	out, _, err := c.ask(ctx, "node-client", 12, target)
	if err != nil {
		return "", err
	}
	a, err := c.allEcho("NodePort from the node", out)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%s from %s's own namespace: %s", target, p.Spec.NodeName, a), nil
}

// fromOutside runs kipvs-echo ask in the "outside" namespace (another host on the nodes'
// segment) and returns its summary.
func (c *checker) fromOutside(ctx context.Context, count int, target string) (string, error) {
	rep, err := c.h.onNode(ctx, routerIP, time.Minute, "ip", "netns", "exec", "outside",
		"kipvs-echo", "ask", "--summary", "--count", strconv.Itoa(count), target)
	if err != nil {
		return "", err
	}
	if rep.Exit != 0 {
		return "", fmt.Errorf("ask %s from outside exited %d: %s", target, rep.Exit, rep.Output)
	}
	return rep.Output, nil
}

// nodePortFromOutside asks every node's NodePort from the "outside" host: each reaches all
// three backends, wherever they run.
func (c *checker) nodePortFromOutside(ctx context.Context) (string, error) {
	var res []string
	for _, n := range c.h.nodes {
		out, err := c.fromOutside(ctx, 12, n.ip+":30900")
		if err != nil {
			return "", err
		}
		a, err := c.allEcho("NodePort of "+n.name+" from outside", out)
		if err != nil {
			return "", err
		}
		res = append(res, fmt.Sprintf("%s:30900: %s; the backends saw %v", n.ip, a, keys(a.clients)))
	}
	return "from " + outsideIP + ": " + strings.Join(res, "; "), nil
}

func keys(m map[string]bool) []string {
	var s []string
	for k := range m {
		s = append(s, k)
	}
	sort.Strings(s)
	return s
}

// proxyTools runs kube-ipvs list and ipvsadm -Ln in the kube-ipvs Pod, as a user debugs.
func (c *checker) proxyTools(ctx context.Context) (string, error) {
	list, dList, err := c.h.kubectl(ctx, "-n", "kube-system", "exec", "ds/kube-ipvs", "-c", "kube-ipvs", "--", "kube-ipvs", "list")
	if err != nil {
		return "", err
	}
	for _, want := range []string{"default/echo:tcp", "default/echo-np:tcp", "kube-system/kube-dns:dns", "default/kubernetes:https"} {
		if !strings.Contains(list, want) {
			return "", fmt.Errorf("kube-ipvs list does not show %s:\n%s", want, list)
		}
	}
	for name, ip := range c.echoPods {
		if !regexpLine(list, ip+":9000", name) {
			return "", fmt.Errorf("kube-ipvs list shows no real server %s:9000 of Pod %s:\n%s", ip, name, list)
		}
	}
	ipvsadm, dAdm, err := c.h.kubectl(ctx, "-n", "kube-system", "exec", "ds/kube-ipvs", "-c", "kube-ipvs", "--", "ipvsadm", "-Ln")
	if err != nil {
		return "", err
	}
	rs := realServers(ipvsadm, c.echoIP+":9000")
	if len(rs) != len(c.echoPods) {
		return "", fmt.Errorf("ipvsadm -Ln shows %d real servers for %s:9000, want %d:\n%s", len(rs), c.echoIP, len(c.echoPods), ipvsadm)
	}
	for _, ip := range c.echoPods {
		if _, ok := rs[ip+":9000"]; !ok {
			return "", fmt.Errorf("ipvsadm -Ln lacks %s:9000 under %s:9000:\n%s", ip, c.echoIP, ipvsadm)
		}
	}
	return fmt.Sprintf("list (%s, %d lines) names the Services and Pods; ipvsadm -Ln (%s) shows %s:9000 -> %d Pods",
		dList.Round(time.Millisecond), strings.Count(list, "\n")+1, dAdm.Round(time.Millisecond), c.echoIP, len(rs)), nil
}

// regexpLine reports whether a line of text holds all of the words.
func regexpLine(text string, words ...string) bool {
	for _, line := range strings.Split(text, "\n") {
		ok := true
		for _, w := range words {
			ok = ok && strings.Contains(line, w)
		}
		if ok {
			return true
		}
	}
	return false
}

// realServers parses ipvsadm -Ln's block of the TCP virtual server vs: real server -> weight.
func realServers(ipvsadm, vs string) map[string]int {
	rs := map[string]int{}
	in := false
	for _, line := range strings.Split(ipvsadm, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 2 && (f[0] == "TCP" || f[0] == "UDP" || f[0] == "SCTP" || f[0] == "FWM"):
			in = f[0] == "TCP" && f[1] == vs
		case in && len(f) >= 4 && f[0] == "->" && f[1] != "RemoteAddress:Port":
			w, _ := strconv.Atoi(f[3])
			rs[f[1]] = w
		}
	}
	return rs
}

// healthAndMetrics reads every node's kube-ipvs /healthz and /metrics through the API
// server's node proxy (the ports the DaemonSet declares).
func (c *checker) healthAndMetrics(ctx context.Context) (string, error) {
	var res []string
	for _, n := range c.h.nodes {
		get := func(port int, path string) (string, error) {
			b, err := c.cs.CoreV1().RESTClient().Get().AbsPath(fmt.Sprintf("/api/v1/nodes/%s:%d/proxy%s", n.name, port, path)).DoRaw(ctx)
			return string(b), err
		}
		health, err := get(10256, "/healthz")
		if err != nil {
			return "", fmt.Errorf("%s /healthz: %w: %s", n.name, err, health)
		}
		metrics, err := get(10249, "/metrics")
		if err != nil {
			return "", fmt.Errorf("%s /metrics: %w", n.name, err)
		}
		for _, want := range []string{"kubeproxy_sync_proxy_rules_duration_seconds_count", "kube_ipvs_last_successful_sync_timestamp_seconds", "rest_client_requests_total"} {
			if !strings.Contains(metrics, want) {
				return "", fmt.Errorf("%s /metrics lacks %s", n.name, want)
			}
		}
		res = append(res, fmt.Sprintf("%s /healthz: %.80s; /metrics: %d lines", n.name, strings.TrimSpace(health), strings.Count(metrics, "\n")))
	}
	return strings.Join(res, "; "), nil
}

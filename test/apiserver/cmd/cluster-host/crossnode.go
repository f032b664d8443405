package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-ipvs/kube-ipvs/test/apiserver/controlplane"
)

// The checks across nodes (NODES=2 or more): what an operator of a real cluster checks
// between nodes, each asserted the way kube-proxy behaves (PROXY=kube-proxy runs them too).

// deployCrossNode applies hack/cluster/manifests/crossnode.yaml: far (a Pod on every node
// but the client's) and local (one Pod on kipvs-node-2, behind Services with the traffic
// policies Local).
func (c *checker) deployCrossNode(ctx context.Context) (string, error) {
	manifest, err := os.ReadFile(filepath.Join(c.h.repo, "hack/cluster/manifests/crossnode.yaml"))
	if err != nil {
		return "", err
	}
	far := len(c.h.nodes) - 1
	manifest = []byte(strings.Replace(string(manifest), "replicas: REPLICAS", "replicas: "+strconv.Itoa(far), 1))
	if err := c.h.apply(ctx, manifest); err != nil {
		return "", err
	}
	if err := c.waitReplicas(ctx, "default", "far", int32(far)); err != nil {
		return "", err
	}
	if err := c.waitReplicas(ctx, "default", "local", 1); err != nil {
		return "", err
	}
	pods, err := c.podsByNode(ctx, "app=far")
	if err != nil {
		return "", err
	}
	local, err := c.podsByNode(ctx, "app=local")
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("far: %s; local: %s", describe(pods), describe(local)), nil
}

// podsByNode lists the ready, not terminating Pods of the selector: name -> node.
func (c *checker) podsByNode(ctx context.Context, selector string) (map[string]string, error) {
	pods, err := c.cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.DeletionTimestamp == nil && podReady(p) {
			m[p.Name] = p.Spec.NodeName
		}
	}
	return m, nil
}

func describe(m map[string]string) string {
	var s []string
	for k, v := range m {
		s = append(s, k+" on "+v)
	}
	sort.Strings(s)
	return strings.Join(s, ", ")
}

// crossNodeService: the client Pod on kipvs-node-1 reaches the far Service, whose Pods run
// only on the other nodes, by its ClusterIP and by its DNS name; every backend answers and
// sees the client Pod's own address (pod to pod across nodes is routed, not masqueraded).
func (c *checker) crossNodeService(ctx context.Context) (string, error) {
	client, err := c.cs.CoreV1().Pods("default").Get(ctx, "client", metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	far, err := c.podsByNode(ctx, "app=far")
	if err != nil {
		return "", err
	}
	for pod, node := range far {
		if node == client.Spec.NodeName {
			return "", fmt.Errorf("far Pod %s runs on the client's node %s", pod, node)
		}
	}
	svc, err := c.cs.CoreV1().Services("default").Get(ctx, "far", metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	var res []string
	waited, err := c.converge(ctx, "the far Service", func() error {
		res = nil
		for _, target := range []string{svc.Spec.ClusterIP + ":9000", "far.default.svc.cluster.local:9000", "far:9000"} {
			out, _, err := c.ask(ctx, "client", 10*len(far), target)
			if err != nil {
				return err
			}
			a, err := parseSummary(out)
			if err != nil {
				return err
			}
			for pod := range far {
				if a.byName[pod] == 0 {
					return fmt.Errorf("%s from %s: no answer from %s:\n%s", target, client.Spec.NodeName, pod, out)
				}
			}
			if a.failed > 0 || len(a.byName) != len(far) {
				return fmt.Errorf("%s from %s: %d failed, answers from %v, want exactly %v:\n%s", target, client.Spec.NodeName, a.failed, a, describe(far), out)
			}
			if len(a.clients) != 1 || !a.clients[client.Status.PodIP] {
				return fmt.Errorf("%s: the backends saw clients %v, want the client Pod's own %s", target, keys(a.clients), client.Status.PodIP)
			}
			res = append(res, fmt.Sprintf("%s: %s", target, a))
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("from %s on %s to far (%s)%s: %s; source %s kept", client.Name, client.Spec.NodeName,
		describe(far), waited, strings.Join(res, "; "), client.Status.PodIP), nil
}

// askOutside runs kipvs-echo ask in the "outside" namespace and returns its summary and
// exit status (1 when a request failed).
func (c *checker) askOutside(ctx context.Context, count int, timeout time.Duration, target string) (answers, int, error) {
	rep, err := c.h.onNode(ctx, routerIP, time.Minute, "ip", "netns", "exec", "outside",
		"kipvs-echo", "ask", "--summary", "--count", strconv.Itoa(count), "--timeout", timeout.String(), target)
	if err != nil {
		return answers{}, 0, err
	}
	a, err := parseSummary(rep.Output)
	if err != nil {
		return a, rep.Exit, fmt.Errorf("ask %s from outside: %w", target, err)
	}
	return a, rep.Exit, nil
}

// trafficPolicyLocal checks the Services of the local Pod (on kipvs-node-2):
//   - externalTrafficPolicy Local, from outside: the node with the endpoint answers, and the
//     Pod sees the outside host's own address; a node without one does not forward (kube-proxy
//     drops such traffic); the healthCheckNodePort says 200 with one local endpoint on the
//     first and 503 on the other;
//   - internalTrafficPolicy Local: a Pod on the endpoint's node reaches it; a Pod on another
//     node gets no answer (kube-proxy drops it too).
func (c *checker) trafficPolicyLocal(ctx context.Context) (string, error) {
	local, err := c.podsByNode(ctx, "app=local")
	if err != nil {
		return "", err
	}
	if len(local) != 1 {
		return "", fmt.Errorf("local Pods: %s, want one", describe(local))
	}
	// The one Pod and its node.
	var pod, home string
	for p, n := range local {
		pod, home = p, n
	}
	homeNode, _ := c.h.nodeOf(home)
	var other clusterNode
	for _, n := range c.h.nodes {
		if n.name != home {
			other = n
			break
		}
	}
	var res []string

	var a answers
	waited, err := c.converge(ctx, "the Local Services", func() error {
		var exit int
		var err error
		a, exit, err = c.askOutside(ctx, 6, 2*time.Second, homeNode.ip+":30901")
		if err != nil {
			return err
		}
		if exit != 0 || a.failed > 0 || a.byName[pod] != 6 {
			return fmt.Errorf("eTP Local NodePort %s:30901 (the endpoint's node) from outside: %v, %d failed, want 6 answers from %s", homeNode.ip, a, a.failed, pod)
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	if len(a.clients) != 1 || !a.clients[outsideIP] {
		return "", fmt.Errorf("eTP Local NodePort %s:30901: the Pod saw clients %v, want the outside host's own %s", homeNode.ip, keys(a.clients), outsideIP)
	}
	res = append(res, fmt.Sprintf("eTP Local NodePort on %s%s: %s, client %s kept", home, waited, a, outsideIP))

	a, _, err = c.askOutside(ctx, 3, 2*time.Second, other.ip+":30901")
	if err != nil {
		return "", err
	}
	if len(a.byName) > 0 || a.failed != 3 {
		return "", fmt.Errorf("eTP Local NodePort %s:30901 (no endpoint on %s) from outside: answers %v, want none (not forwarded)", other.ip, other.name, a)
	}
	res = append(res, fmt.Sprintf("on %s (no endpoint): 3 of 3 not answered", other.name))

	svc, err := c.cs.CoreV1().Services("default").Get(ctx, "local-np", metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	hc := int(svc.Spec.HealthCheckNodePort)
	for _, want := range []struct {
		node   string
		status int
		local  string
	}{{home, http.StatusOK, `"localEndpoints":1`}, {other.name, http.StatusServiceUnavailable, `"localEndpoints":0`}} {
		var code int
		body, _ := c.cs.CoreV1().RESTClient().Get().AbsPath(fmt.Sprintf("/api/v1/nodes/%s:%d/proxy/", want.node, hc)).
			Do(ctx).StatusCode(&code).Raw()
		if code != want.status || !strings.Contains(strings.ReplaceAll(string(body), " ", ""), want.local) {
			return "", fmt.Errorf("healthCheckNodePort %d on %s: %d %s, want %d with %s", hc, want.node, code, body, want.status, want.local)
		}
	}
	res = append(res, fmt.Sprintf("healthCheckNodePort %d: 200 on %s, 503 on %s", hc, home, other.name))

	clients, err := c.nodeClients(ctx)
	if err != nil {
		return "", err
	}
	isvc, err := c.cs.CoreV1().Services("default").Get(ctx, "local-int", metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	target := isvc.Spec.ClusterIP + ":9000"
	if _, err := c.converge(ctx, "the internalTrafficPolicy Local Service", func() error {
		out, _, err := c.ask(ctx, clients[home], 6, target)
		if err != nil {
			return fmt.Errorf("iTP Local from %s (the endpoint's node): %w", home, err)
		}
		if a, err = parseSummary(out); err != nil || a.byName[pod] != 6 {
			return fmt.Errorf("iTP Local from %s (the endpoint's node): %v %v, want 6 answers from %s", home, a, err, pod)
		}
		return nil
	}); err != nil {
		return "", err
	}
	out, _, err := c.h.kubectl(ctx, "exec", clients[other.name], "--", "kipvs-echo", "ask", "--summary", "--count", "3", "--timeout", "2s", target)
	a, perr := parseSummary(out)
	if err == nil || perr != nil || len(a.byName) > 0 || a.failed != 3 {
		return "", fmt.Errorf("iTP Local from %s (no endpoint): %v %v: %s, want 3 of 3 not answered", other.name, err, perr, out)
	}
	res = append(res, fmt.Sprintf("iTP Local ClusterIP: 6 of 6 from %s, 3 of 3 not answered from %s", home, other.name))
	return strings.Join(res, "; "), nil
}

// drain drains the last node, which hosts an echo backend, while the client Pod (on
// kipvs-node-1) sends a request through the echo ClusterIP every 100 ms: no request may
// fail. The node is uncordoned afterwards.
func (c *checker) drain(ctx context.Context) (string, error) {
	node := c.h.nodes[len(c.h.nodes)-1]
	echo, err := c.podsByNode(ctx, "app=echo")
	if err != nil {
		return "", err
	}
	var there []string
	for pod, n := range echo {
		if n == node.name {
			there = append(there, pod)
		}
	}
	if len(there) == 0 {
		return "", fmt.Errorf("no echo Pod on %s to drain (%s)", node.name, describe(echo))
	}
	vs := c.echoIP + ":9000"
	// Before the drain, every backend answers the client, those on the drained node too.
	if err := c.readEchoPods(ctx); err != nil {
		return "", err
	}
	out, _, err := c.ask(ctx, "client", 10*len(c.echoPods), vs)
	if err != nil {
		return "", err
	}
	if _, err := c.allEcho("before the drain", out); err != nil {
		return "", err
	}
	wait := c.startLoop(ctx, 300, vs)
	t := time.Now()
	_, _, drainErr := c.h.kubectl(ctx, "drain", node.name, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=5m")
	dDrain := time.Since(t)
	loopOut, loopErr := wait()
	_, _, uncordonErr := c.h.kubectl(ctx, "uncordon", node.name)
	if drainErr != nil {
		return "", drainErr
	}
	a, err := parseSummary(loopOut)
	if loopErr != nil || err != nil || a.failed > 0 {
		return "", fmt.Errorf("the request loop during the drain of %s: %v %v: %s", node.name, loopErr, err, loopOut)
	}
	if uncordonErr != nil {
		return "", uncordonErr
	}
	if err := c.waitReplicas(ctx, "default", "echo", 3); err != nil {
		return "", err
	}
	if err := c.readEchoPods(ctx); err != nil {
		return "", err
	}
	return fmt.Sprintf("drained %s (echo Pods %s) in %s; 300 requests through %s from kipvs-node-1: %s, 0 failed; uncordoned",
		node.name, strings.Join(there, " "), dDrain.Round(time.Second), vs, a), nil
}

// killProxy SIGKILLs the kube-ipvs container on the client's node while the client sends a
// request through the echo ClusterIP every 100 ms and holds a connection: no request fails
// (the kernel keeps the state), and the container the kubelet restarts adopts it with a
// first sync that writes nothing.
func (c *checker) killProxy(ctx context.Context) (string, error) {
	client, err := c.cs.CoreV1().Pods("default").Get(ctx, "client", metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	node, _ := c.h.nodeOf(client.Spec.NodeName)
	pod, err := c.waitProxyPod(ctx, node.name, "", "")
	if err != nil {
		return "", err
	}
	var id string
	var restarts int32
	for _, st := range pod.Status.ContainerStatuses {
		if st.Name == "kube-ipvs" {
			id, restarts = strings.TrimPrefix(st.ContainerID, "containerd://"), st.RestartCount
		}
	}
	if id == "" {
		return "", fmt.Errorf("Pod %s: no kube-ipvs container ID", pod.Name)
	}
	held, err := c.hold(ctx, "client", c.echoIP+":9000")
	if err != nil {
		return "", err
	}
	defer func() { _ = held.cmd.Process.Kill() }()
	vs := c.echoIP + ":9000"
	wait := c.startLoop(ctx, 200, vs)
	t := time.Now()
	rep, err := c.h.onNode(ctx, node.ip, 30*time.Second, "ctr", "-n", "k8s.io", "tasks", "kill", "--signal", "SIGKILL", id)
	if err == nil && rep.Exit != 0 {
		err = fmt.Errorf("exit %d: %s", rep.Exit, rep.Output)
	}
	if err != nil {
		return "", fmt.Errorf("SIGKILL of container %s on %s: %w", id, node.name, err)
	}
	var restarted *corev1.Pod
	if err := controlplane.Poll(5*time.Minute, "the kube-ipvs container of "+pod.Name+" restarted and Ready", func() bool {
		p, err := c.cs.CoreV1().Pods("kube-system").Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil || !podReady(p) {
			return false
		}
		for _, st := range p.Status.ContainerStatuses {
			if st.Name == "kube-ipvs" && st.RestartCount > restarts {
				restarted = p
				return true
			}
		}
		return false
	}); err != nil {
		return "", err
	}
	dRestart := time.Since(t)
	first, err := c.firstSync(ctx, pod.Name)
	if err != nil {
		return "", err
	}
	if prev, _, err := c.h.kubectl(ctx, "-n", "kube-system", "logs", pod.Name, "-c", "kube-ipvs", "--previous"); err == nil {
		c.proxyLog = append(c.proxyLog, fmt.Sprintf("=== %s/kube-ipvs (killed)\n%s", pod.Name, prev))
	}
	loopOut, loopErr := wait()
	a, err := parseSummary(loopOut)
	if loopErr != nil || err != nil || a.failed > 0 {
		return "", fmt.Errorf("the request loop while kube-ipvs was killed on %s: %v %v: %s", node.name, loopErr, err, loopOut)
	}
	verdict, err := held.end()
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("SIGKILL of %s's kube-ipvs (Pod %s); restarted and Ready %s later; first sync %s; 200 requests through %s: %s, 0 failed; held connection: %s",
		node.name, restarted.Name, dRestart.Round(time.Second), first, vs, a, lastLine(verdict)), nil
}

// converge runs check until it passes, every 2 s for up to 2 minutes, and says how long that
// took when it did not pass at once. The checks across nodes compare what the proxies do,
// not how soon: a proxy whose syncs are slow on this node (kube-proxy's, docs/cluster.md) is
// given time to program the Services before its behaviour is judged. How soon the IPVS table
// follows a change is the scale check's to measure.
func (c *checker) converge(ctx context.Context, what string, check func() error) (string, error) {
	t := time.Now()
	var err error
	for {
		if err = check(); err == nil {
			break
		}
		if time.Since(t) > 2*time.Minute || ctx.Err() != nil {
			return "", fmt.Errorf("%s, still after %s: %w", what, time.Since(t).Round(time.Second), err)
		}
		time.Sleep(2 * time.Second)
	}
	if d := time.Since(t); d > 5*time.Second {
		return fmt.Sprintf(" (programmed %s after the first try)", d.Round(time.Second)), nil
	}
	return "", nil
}

package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-ipvs/kube-ipvs/test/apiserver/controlplane"
)

const proxySelector = "app.kubernetes.io/name=kube-ipvs"

// deployProxy applies deploy/ through hack/cluster/kube-ipvs's kustomization, as a user does,
// and waits for the DaemonSet's Pod to pass its readiness probe.
func (c *checker) deployProxy(ctx context.Context) (string, error) {
	t := time.Now()
	if _, _, err := c.h.kubectl(ctx, "apply", "-k", filepath.Join(c.h.repo, "hack/cluster/kube-ipvs")); err != nil {
		return "", err
	}
	pods, err := c.waitProxyPods(ctx, "kube-ipvs:cluster")
	if err != nil {
		return "", err
	}
	if ds, err := c.cs.AppsV1().DaemonSets("kube-system").List(ctx, metav1.ListOptions{}); err == nil {
		for _, d := range ds.Items {
			if d.Name == "kube-proxy" {
				return "", fmt.Errorf("a kube-proxy DaemonSet exists")
			}
		}
	}
	var names []string
	for _, p := range pods {
		names = append(names, p.Name+" on "+p.Spec.NodeName)
	}
	return fmt.Sprintf("Pods %s Ready %s after kubectl apply -k (image kube-ipvs:cluster, no kube-proxy)",
		strings.Join(names, ", "), time.Since(t).Round(time.Second)), nil
}

// waitProxyPod waits until the kube-ipvs Pod on node is Ready, is not the Pod named old, and
// runs image, and no other kube-ipvs Pod is on that node; it returns that Pod.
func (c *checker) waitProxyPod(ctx context.Context, node, old, image string) (*corev1.Pod, error) {
	n := &noter{boot: c.boot}
	var ready *corev1.Pod
	err := controlplane.Poll(10*time.Minute, "a Ready kube-ipvs Pod on "+node+" running "+image, func() bool {
		ready = nil
		pods, err := c.cs.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: proxySelector,
			FieldSelector: "spec.nodeName=" + node})
		if err != nil {
			n.note("kube-ipvs Pods: " + err.Error())
			return false
		}
		var states []string
		for i := range pods.Items {
			p := &pods.Items[i]
			states = append(states, p.Name+" "+podState(p))
			if p.Name != old && p.DeletionTimestamp == nil && podReady(p) && (image == "" || p.Spec.Containers[0].Image == image) {
				ready = p
			}
		}
		n.note("kube-ipvs Pods on " + node + ": " + strings.Join(states, "; "))
		return ready != nil && len(pods.Items) == 1
	})
	return ready, err
}

// waitProxyPods waits for a Ready kube-ipvs Pod running image on every node and returns them
// in the nodes' order.
func (c *checker) waitProxyPods(ctx context.Context, image string) ([]*corev1.Pod, error) {
	var pods []*corev1.Pod
	for _, node := range c.h.nodes {
		p, err := c.waitProxyPod(ctx, node.name, "", image)
		if err != nil {
			return nil, err
		}
		pods = append(pods, p)
	}
	return pods, nil
}

// deployDNS applies hack/cluster/manifests/coredns.yaml with the version of the CoreDNS
// built here and waits for CoreDNS to be Ready: its kubernetes plugin has listed Services
// and EndpointSlices through the `kubernetes` Service, which kube-ipvs serves.
func (c *checker) deployDNS(ctx context.Context) (string, error) {
	mod, err := os.ReadFile(filepath.Join(c.h.repo, "test/coredns/go.mod"))
	if err != nil {
		return "", err
	}
	m := regexp.MustCompile(`(?m)^\s*github\.com/coredns/coredns (v\S+)`).FindSubmatch(mod)
	if m == nil {
		return "", fmt.Errorf("no CoreDNS version in test/coredns/go.mod")
	}
	manifest, err := os.ReadFile(filepath.Join(c.h.repo, "hack/cluster/manifests/coredns.yaml"))
	if err != nil {
		return "", err
	}
	manifest = []byte(strings.ReplaceAll(string(manifest), ":VERSION", ":"+string(m[1])))
	t := time.Now()
	if err := c.h.apply(ctx, manifest); err != nil {
		return "", err
	}
	if err := c.waitReplicas(ctx, "kube-system", "coredns", 1); err != nil {
		return "", err
	}
	return fmt.Sprintf("CoreDNS %s Ready %s after kubectl apply", m[1], time.Since(t).Round(time.Second)), nil
}

// apply runs kubectl apply -f - on manifest.
func (h *host) apply(ctx context.Context, manifest []byte) error {
	cmd := exec.CommandContext(ctx, filepath.Join(h.Bin, "kubectl"), "--kubeconfig="+h.adminKC, "apply", "-f", "-")
	cmd.Stdin = strings.NewReader(string(manifest))
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("kubectl apply: %v: %s", err, out)
	}
	return nil
}

// waitReplicas waits until Deployment ns/name has want ready replicas and no others.
func (c *checker) waitReplicas(ctx context.Context, ns, name string, want int32) error {
	n := &noter{boot: c.boot}
	return controlplane.Poll(10*time.Minute, fmt.Sprintf("Deployment %s/%s with %d ready replicas", ns, name, want), func() bool {
		d, err := c.cs.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			n.note(err.Error())
			return false
		}
		pods, _ := c.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: metav1.FormatLabelSelector(d.Spec.Selector)})
		var states []string
		if pods != nil {
			for i := range pods.Items {
				states = append(states, pods.Items[i].Name+" "+podState(&pods.Items[i]))
			}
		}
		sort.Strings(states)
		n.note(fmt.Sprintf("Deployment %s: %d/%d ready; %s", name, d.Status.ReadyReplicas, want, strings.Join(states, "; ")))
		return d.Status.ReadyReplicas == want && d.Status.Replicas == want && d.Status.UpdatedReplicas == want
	})
}

// deployWorkload applies hack/cluster/manifests/echo.yaml and waits for the three echo Pods and
// the two clients.
func (c *checker) deployWorkload(ctx context.Context) (string, error) {
	manifest, err := os.ReadFile(filepath.Join(c.h.repo, "hack/cluster/manifests/echo.yaml"))
	if err != nil {
		return "", err
	}
	if err := c.h.apply(ctx, manifest); err != nil {
		return "", err
	}
	if err := c.waitReplicas(ctx, "default", "echo", 3); err != nil {
		return "", err
	}
	for _, name := range []string{"client", "node-client"} {
		if err := controlplane.Poll(5*time.Minute, "Pod "+name+" Running", func() bool {
			p, err := c.cs.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
			return err == nil && p.Status.Phase == corev1.PodRunning
		}); err != nil {
			return "", err
		}
	}
	if _, err := c.nodeClients(ctx); err != nil {
		return "", err
	}
	client, err := c.cs.CoreV1().Pods("default").Get(ctx, "client", metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	c.clientNode = client.Status.HostIP
	svc, err := c.cs.CoreV1().Services("default").Get(ctx, "echo", metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	c.echoIP = svc.Spec.ClusterIP
	if err := c.readEchoPods(ctx); err != nil {
		return "", err
	}
	var starts, nodes []string
	for name := range c.echoPods {
		p, err := c.cs.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return "", err
		}
		node, ok := c.h.nodeOf(p.Spec.NodeName)
		if !ok || node.podCIDR == nil || !node.podCIDR.Contains(parseIP(p.Status.PodIP)) {
			return "", fmt.Errorf("Pod %s on %s has IP %s, outside its node's podCIDR %v", name, p.Spec.NodeName, p.Status.PodIP, node.podCIDR)
		}
		nodes = append(nodes, p.Spec.NodeName)
		starts = append(starts, readyAfter(p).String())
	}
	sort.Strings(starts)
	sort.Strings(nodes)
	return fmt.Sprintf("ClusterIP %s; Pods %s on %s; created to Ready in %s", c.echoIP, c.podList(),
		strings.Join(nodes, ", "), strings.Join(starts, ", ")), nil
}

// nodeClients waits for the clients DaemonSet's Pod on every node to run and returns their
// names by node.
func (c *checker) nodeClients(ctx context.Context) (map[string]string, error) {
	byNode := map[string]string{}
	err := controlplane.Poll(5*time.Minute, "a clients Pod running on every node", func() bool {
		pods, err := c.cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=clients"})
		if err != nil {
			return false
		}
		clear(byNode)
		for i := range pods.Items {
			p := &pods.Items[i]
			if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
				byNode[p.Spec.NodeName] = p.Name
			}
		}
		return len(byNode) == len(c.h.nodes)
	})
	return byNode, err
}

// readEchoPods records the echo Deployment's ready, not terminating Pods.
func (c *checker) readEchoPods(ctx context.Context) error {
	pods, err := c.cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=echo"})
	if err != nil {
		return err
	}
	c.echoPods = map[string]string{}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.DeletionTimestamp == nil && podReady(p) {
			c.echoPods[p.Name] = p.Status.PodIP
		}
	}
	return nil
}

func (c *checker) podList() string {
	var s []string
	for name, ip := range c.echoPods {
		s = append(s, name+"="+ip)
	}
	sort.Strings(s)
	return strings.Join(s, " ")
}

func podReady(p *corev1.Pod) bool {
	for _, cond := range p.Status.Conditions {
		if cond.Type == corev1.PodReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}

// readyAfter is the time from the Pod's creation to its Ready condition (seconds: the API's
// resolution).
func readyAfter(p *corev1.Pod) time.Duration {
	for _, cond := range p.Status.Conditions {
		if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
			return cond.LastTransitionTime.Sub(p.CreationTimestamp.Time)
		}
	}
	return -1
}

// podState is the Pod's phase and what it waits for.
func podState(p *corev1.Pod) string {
	st := string(p.Status.Phase)
	if podReady(p) {
		st += " Ready"
	}
	for _, cs := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
		if cs.State.Waiting != nil && cs.State.Waiting.Reason != "" {
			st += " " + cs.Name + ":" + cs.State.Waiting.Reason + " " + cs.State.Waiting.Message
		}
		if cs.LastTerminationState.Terminated != nil {
			st += fmt.Sprintf(" %s:restarted(%s %d)", cs.Name, cs.LastTerminationState.Terminated.Reason, cs.LastTerminationState.Terminated.ExitCode)
		}
	}
	if p.DeletionTimestamp != nil {
		st += " Terminating"
	}
	return st
}

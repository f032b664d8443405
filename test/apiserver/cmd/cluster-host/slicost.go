package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// proxyCost is what the proxy process on a node costs: read from /proc and its cgroup by
// the node's agent.
type proxyCost struct {
	rssKiB, peakRSSKiB uint64  // the process's resident set now and at most (VmRSS, VmHWM)
	cgroupPeak         uint64  // its container cgroup's memory.peak in bytes (0: not read)
	cpuSecs            float64 // its container cgroup's usage_usec, in seconds
}

// proxyCostScript prints VmRSS, VmHWM, the cgroup's usage_usec and memory.peak of the
// process named $1 in the node's namespaces (the agent runs in them: pidof finds that node's
// proxy alone; the node's is busybox's, without -s).
const proxyCostScript = `p=$(pidof "$1") || exit 3
p=${p%% *}
c=$(sed -n 's/^0:://p' /proc/$p/cgroup)
echo rss $(awk '/^VmRSS/{print $2}' /proc/$p/status)
echo hwm $(awk '/^VmHWM/{print $2}' /proc/$p/status)
echo $(grep '^usage_usec' /sys/fs/cgroup$c/cpu.stat)
echo peak $(cat /sys/fs/cgroup$c/memory.peak 2>/dev/null || echo 0)`

func (c *checker) proxyCost(ctx context.Context, node clusterNode) (proxyCost, error) {
	process := "kube-ipvs"
	if c.h.proxy == "kube-proxy" {
		process = "kube-proxy"
	}
	rep, err := c.h.onNode(ctx, node.ip, 30*time.Second, "sh", "-c", proxyCostScript, "sh", process)
	if err != nil {
		return proxyCost{}, err
	}
	if rep.Exit != 0 {
		return proxyCost{}, fmt.Errorf("reading %s's cost on %s: exit %d: %s", process, node.name, rep.Exit, rep.Output)
	}
	return parseProxyCost(rep.Output)
}

func parseProxyCost(out string) (proxyCost, error) {
	var pc proxyCost
	seen := 0
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		v, err := strconv.ParseUint(f[1], 10, 64)
		if err != nil {
			return pc, fmt.Errorf("%q: %v", line, err)
		}
		switch f[0] {
		case "rss":
			pc.rssKiB = v
		case "hwm":
			pc.peakRSSKiB = v
		case "usage_usec":
			pc.cpuSecs = float64(v) / 1e6
		case "peak":
			pc.cgroupPeak = v
		default:
			continue
		}
		seen++
	}
	if seen != 4 {
		return pc, fmt.Errorf("the proxy's cost: %q", out)
	}
	return pc, nil
}

// sliRestart deletes the proxy's Pod on the first node and measures how long its successor
// takes to be Ready with every Service programmed (its readiness says so: kube-ipvs is Ready
// after its first whole sync, kube-proxy after its first sync), and what that sync wrote.
func (c *checker) sliRestart(ctx context.Context) (string, error) {
	node := c.h.nodes[0]
	sel := proxySelector
	if c.h.proxy == "kube-proxy" {
		sel = kubeProxySelector
	}
	pods, err := c.cs.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: sel, FieldSelector: "spec.nodeName=" + node.name})
	if err != nil || len(pods.Items) != 1 {
		return "", fmt.Errorf("the proxy's Pod on %s: %d found, %v", node.name, len(pods.Items), err)
	}
	old := pods.Items[0].Name
	t := time.Now()
	if err := c.cs.CoreV1().Pods("kube-system").Delete(ctx, old, metav1.DeleteOptions{}); err != nil {
		return "", err
	}
	var ready *corev1.Pod
	err = poll(ctx, 15*time.Minute, time.Second, func() (bool, error) {
		l, err := c.cs.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: sel, FieldSelector: "spec.nodeName=" + node.name})
		if err != nil {
			return false, nil
		}
		for i := range l.Items {
			if p := &l.Items[i]; p.Name != old && p.DeletionTimestamp == nil && podReady(p) {
				ready = p
			}
		}
		return ready != nil, nil
	})
	if err != nil {
		return "", fmt.Errorf("no new proxy Pod Ready on %s: %w", node.name, err)
	}
	d := time.Since(t)
	c.sli.result.RestartReadySecs = d.Seconds()
	return fmt.Sprintf("%s Ready %s after its predecessor was deleted, with %d Services", ready.Name, d.Round(time.Second), c.sli.services), nil
}

package main

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-ipvs/kube-ipvs/test/apiserver/controlplane"
)

// nodeReady waits for every kubelet to register its Node and for every Node to be Ready
// with its podCIDR, address and zone; then it routes each podCIDR to its node on every
// other node and on the network (podNetwork).
func (c *checker) nodeReady(ctx context.Context) (string, error) {
	n := &noter{boot: c.boot}
	nodes := c.h.nodes
	if err := controlplane.Poll(15*time.Minute, fmt.Sprintf("%d Node(s) Ready", len(nodes)), func() bool {
		var states []string
		ready := 0
		for _, want := range nodes {
			node, err := c.cs.CoreV1().Nodes().Get(ctx, want.name, metav1.GetOptions{})
			if err != nil {
				states = append(states, want.name+": not registered")
				continue
			}
			st := "no Ready condition yet"
			for _, cond := range node.Status.Conditions {
				if cond.Type == corev1.NodeReady {
					st = fmt.Sprintf("Ready=%s (%s)", cond.Status, cond.Reason)
					if cond.Status == corev1.ConditionTrue && node.Spec.PodCIDR != "" {
						ready++
					}
				}
			}
			states = append(states, fmt.Sprintf("%s: podCIDR %q, %s", want.name, node.Spec.PodCIDR, st))
		}
		n.note(strings.Join(states, "; "))
		return ready == len(nodes)
	}); err != nil {
		return "", err
	}
	var desc []string
	for i := range nodes {
		node, err := c.cs.CoreV1().Nodes().Get(ctx, nodes[i].name, metav1.GetOptions{})
		if err != nil {
			return "", err
		}
		if _, nodes[i].podCIDR, err = net.ParseCIDR(node.Spec.PodCIDR); err != nil {
			return "", fmt.Errorf("Node %s: podCIDR %q: %w", node.Name, node.Spec.PodCIDR, err)
		}
		if got := internalIP(node); got != nodes[i].ip {
			return "", fmt.Errorf("Node %s: InternalIP %q, want %s", node.Name, got, nodes[i].ip)
		}
		if got := node.Labels[corev1.LabelTopologyZone]; got != nodes[i].zone {
			return "", fmt.Errorf("Node %s: zone label %q, want %s", node.Name, got, nodes[i].zone)
		}
		desc = append(desc, fmt.Sprintf("%s (%s, %s, podCIDR %s)", node.Name, nodes[i].ip, nodes[i].zone, node.Spec.PodCIDR))
		if i == 0 {
			desc[0] = fmt.Sprintf("kubelet %s, %s: %s", node.Status.NodeInfo.KubeletVersion, node.Status.NodeInfo.ContainerRuntimeVersion, desc[0])
		}
	}
	ready := time.Since(c.boot)
	if err := c.podNetwork(ctx); err != nil {
		return "", err
	}
	return fmt.Sprintf("%s after boot, pod network routed %s later; %s", ready.Round(time.Second),
		(time.Since(c.boot) - ready).Round(100*time.Millisecond), strings.Join(desc, ", ")), nil
}

// podNetwork routes every node's podCIDR through that node's address: on each other node
// (pod to pod across nodes keeps the pods' addresses, as kindnet's routes do) and on the
// network, through which the API server's egress reaches the pods. The nodes are fixed for
// the cluster's life, so the routes are added once, when every Node has its podCIDR.
func (c *checker) podNetwork(ctx context.Context) error {
	for _, on := range append([]string{routerIP}, nodeIPs(c.h.nodes)...) {
		for _, to := range c.h.nodes {
			if to.ip == on {
				continue
			}
			rep, err := c.h.onNode(ctx, on, 30*time.Second, "ip", "route", "replace", to.podCIDR.String(), "via", to.ip)
			if err == nil && rep.Exit != 0 {
				err = fmt.Errorf("exit %d: %s", rep.Exit, rep.Output)
			}
			if err != nil {
				return fmt.Errorf("routing %s via %s on %s: %w", to.podCIDR, to.ip, on, err)
			}
		}
	}
	return nil
}

func nodeIPs(nodes []clusterNode) []string {
	var ips []string
	for _, n := range nodes {
		ips = append(ips, n.ip)
	}
	return ips
}

// nodeOf is the cluster node named name.
func (h *host) nodeOf(name string) (clusterNode, bool) {
	for _, n := range h.nodes {
		if n.name == name {
			return n, true
		}
	}
	return clusterNode{}, false
}

func internalIP(n *corev1.Node) string {
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			return a.Address
		}
	}
	return ""
}

// nodeCost reports what each node costs the guest, read from the network's side: the
// memory its cgroup holds now (its daemons, its Pods and the files it wrote on the guest's
// tmpfs, its images among them) and the CPU time its cgroup used since it started; and the
// guest's memory in use. It never fails the run: it is a measurement.
func (c *checker) nodeCost(ctx context.Context) (string, error) {
	var res []string
	for _, n := range c.h.nodes {
		cg := "/sys/fs/cgroup/" + n.name
		rep, err := c.h.onNode(ctx, routerIP, 30*time.Second, "cat", cg+"/memory.current", cg+"/cpu.stat")
		if err != nil || rep.Exit != 0 {
			return fmt.Sprintf("not read: %v %s", err, rep.Output), nil
		}
		f := strings.Fields(rep.Output)
		if len(f) < 3 {
			return "not read: " + rep.Output, nil
		}
		mem, _ := strconv.ParseFloat(f[0], 64)
		usec := 0.0
		for i := 1; i+1 < len(f); i += 2 {
			if f[i] == "usage_usec" {
				usec, _ = strconv.ParseFloat(f[i+1], 64)
			}
		}
		res = append(res, fmt.Sprintf("%s %.0f MiB, %.0f CPU-s", n.name, mem/(1<<20), usec/1e6))
	}
	rep, err := c.h.onNode(ctx, routerIP, 30*time.Second, "cat", "/proc/meminfo")
	if err == nil {
		kib := map[string]float64{}
		for _, line := range strings.Split(rep.Output, "\n") {
			if f := strings.Fields(line); len(f) >= 2 {
				kib[strings.TrimSuffix(f[0], ":")], _ = strconv.ParseFloat(f[1], 64)
			}
		}
		res = append(res, fmt.Sprintf("guest: %.0f of %.0f MiB in use", (kib["MemTotal"]-kib["MemAvailable"])/1024, kib["MemTotal"]/1024))
	}
	return strings.Join(res, "; "), nil
}

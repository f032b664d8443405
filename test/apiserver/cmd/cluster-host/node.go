package main

import (
	"context"
	"fmt"
	"net"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-ipvs/kube-ipvs/test/apiserver/controlplane"
)

// nodeReady waits for the kubelet to register the Node and for the Node to be Ready.
func (c *checker) nodeReady(ctx context.Context) (string, error) {
	n := &noter{boot: c.boot}
	if err := controlplane.Poll(15*time.Minute, "Node "+nodeName+" Ready", func() bool {
		node, err := c.cs.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		if err != nil {
			n.note("Node: " + err.Error())
			return false
		}
		for _, cond := range node.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				n.note(fmt.Sprintf("Node registered, podCIDR %q, Ready=%s (%s)", node.Spec.PodCIDR, cond.Status, cond.Reason))
				return cond.Status == corev1.ConditionTrue
			}
		}
		n.note("Node registered, no Ready condition yet")
		return false
	}); err != nil {
		return "", err
	}
	node, err := c.cs.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	if _, c.podCIDR, err = net.ParseCIDR(node.Spec.PodCIDR); err != nil {
		return "", fmt.Errorf("podCIDR %q: %w", node.Spec.PodCIDR, err)
	}
	return fmt.Sprintf("%s after boot (kubelet %s, %s, podCIDR %s, InternalIP %s)",
		time.Since(c.boot).Round(time.Second), node.Status.NodeInfo.KubeletVersion,
		node.Status.NodeInfo.ContainerRuntimeVersion, node.Spec.PodCIDR, internalIP(node)), nil
}

func internalIP(n *corev1.Node) string {
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			return a.Address
		}
	}
	return ""
}

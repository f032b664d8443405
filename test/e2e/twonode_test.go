//go:build guest

package e2e

import (
	"strings"
	"testing"
)

// Two nodes, each with its own kube-ipvs, pods routed between them as a routed CNI does, and
// an outside client. Every backend lives on node B; node A has none.
func TestTwoNodes(t *testing.T) {
	c := newTwoNodes(t)
	onB := []ep{{ip: "10.244.2.11", node: "node-b"}, {ip: "10.244.2.12", node: "node-b"}}
	for i, ip := range []string{"10.244.2.11", "10.244.2.12"} {
		c.b.pod(t, "tb"+string(rune('1'+i)), ip).ServeTCPWho(t, 8080, "tb"+string(rune('1'+i)))
	}
	podA := c.a.pod(t, "tca", "10.244.1.50")
	podB := c.b.pod(t, "tcb", "10.244.2.50")

	dir := c.manifests(t)
	writeManifests(t, dir, "svc.yaml",
		serviceYAML(svcOpts{name: "cip", clusterIP: "10.96.30.1", port: 80, targetPort: 8080}),
		sliceYAML("cip", "cip-1", "TCP", 8080, "", onB...),
		serviceYAML(svcOpts{name: "npc", typ: "NodePort", clusterIP: "10.96.30.2", port: 80, targetPort: 8080, nodePort: 30100}),
		sliceYAML("npc", "npc-1", "TCP", 8080, "", onB...),
		serviceYAML(svcOpts{name: "lbl", typ: "LoadBalancer", clusterIP: "10.96.30.3", port: 80, targetPort: 8080, nodePort: 30101,
			lbIP: "198.51.100.30", externalIPs: []string{"198.51.100.31"}, externalLocal: true, healthCheckNodePort: 30201}),
		sliceYAML("lbl", "lbl-1", "TCP", 8080, "", onB...),
		serviceYAML(svcOpts{name: "itp", clusterIP: "10.96.30.4", port: 80, targetPort: 8080, internalLocal: true}),
		sliceYAML("itp", "itp-1", "TCP", 8080, "", onB...),
	)
	c.start(t, dir)
	eventually(t, firstSync, "both nodes to program every Service", func() bool {
		a, b := c.a.ipvsTable(t), c.b.ipvsTable(t)
		return realServers(blockOf(a, "TCP", "10.96.30.4:80")) == 0 && realServers(blockOf(a, "TCP", "10.96.30.1:80")) == 2 &&
			strings.Contains(a, "198.51.100.30:80") && realServers(blockOf(b, "TCP", "198.51.100.30:80")) == 2 &&
			realServers(blockOf(b, "TCP", "10.96.30.4:80")) == 2
	})
	aNodePort, bNodePort := c.a.ip.String()+":30101", c.b.ip.String()+":30101"

	t.Run("ClusterIP from a pod on A to backends only on B", func(t *testing.T) {
		wantAnswers(t, podA, "10.96.30.1:80", "10.244.1.50", 4, "tb1", "tb2")
	})
	t.Run("NodePort Cluster on the empty node is masqueraded to B's pods", func(t *testing.T) {
		wantAnswers(t, c.outside, c.a.ip.String()+":30100", c.a.ip.String(), 4, "tb1", "tb2")
	})
	t.Run("Local: outside clients only where endpoints are, client IP kept", func(t *testing.T) {
		wantNoAnswer(t, c.outside, aNodePort, "node A has no local endpoint")
		wantAnswers(t, c.outside, bNodePort, outsideIP, 4, "tb1", "tb2")
		for _, vip := range []string{"198.51.100.30:80", "198.51.100.31:80"} {
			addr, _, _ := strings.Cut(vip, ":")
			c.routeTo(t, addr, c.a)
			wantNoAnswer(t, c.outside, vip, "routed to node A, which has no local endpoint")
			c.routeTo(t, addr, c.b)
			wantAnswers(t, c.outside, vip, outsideIP, 4, "tb1", "tb2")
		}
	})
	t.Run("Local: health-check node port", func(t *testing.T) {
		if code, body := c.healthCheck(t, c.a, 30201); code != 503 || !strings.Contains(body, `"localEndpoints":0`) {
			t.Errorf("node A (no endpoint): %d %s, want 503 with localEndpoints 0", code, body)
		}
		if code, body := c.healthCheck(t, c.b, 30201); code != 200 || !strings.Contains(body, `"localEndpoints":2`) {
			t.Errorf("node B (two endpoints): %d %s, want 200 with localEndpoints 2", code, body)
		}
	})
	t.Run("Local: pods and nodes reach it from any node", func(t *testing.T) {
		// In-cluster traffic there is masqueraded (to node A's address toward B), so that
		// replies return through the node that balanced it, even from a pod on B sent to
		// node A's node port and balanced back to B.
		for _, addr := range []string{aNodePort, "198.51.100.30:80", "198.51.100.31:80"} {
			wantAnswers(t, podA, addr, c.a.ip.String(), 4, "tb1", "tb2")
		}
		wantAnswers(t, podB, aNodePort, c.a.ip.String(), 4, "tb1", "tb2")
		wantAnswers(t, c.a.self(), aNodePort, c.a.ip.String(), 4, "tb1", "tb2")
		for _, addr := range []string{"198.51.100.30:80", "198.51.100.31:80"} {
			wantAnswers(t, c.a.self(), addr, c.a.ip.String(), 4, "tb1", "tb2")
		}
		// Outside clients still reach only local endpoints, with their address kept.
		wantNoAnswer(t, c.outside, aNodePort, "the in-cluster path must not serve outside clients")
		wantAnswers(t, c.outside, bNodePort, outsideIP, 2, "tb1", "tb2")
	})
	t.Run("internalTrafficPolicy Local", func(t *testing.T) {
		wantNoAnswer(t, podA, "10.96.30.4:80", "internalTrafficPolicy Local and no endpoint on node A")
		wantAnswers(t, podB, "10.96.30.4:80", "10.244.2.50", 4, "tb1", "tb2")
	})
}

//go:build guest

package e2e

import (
	"fmt"
	"strings"
)

// svcOpts describes a test Service; manifests are generated from it.
type svcOpts struct {
	name, typ, clusterIP string
	annotations          map[string]string
	externalIPs          []string
	lbIP                 string
	proto                string // TCP (default), UDP, SCTP
	port, targetPort     int
	nodePort             int
	affinity             bool
	family               string // IPv4 (default) or IPv6
	// externalLocal and internalLocal set the traffic policies to Local, with the given
	// health-check node port for the first.
	externalLocal, internalLocal bool
	healthCheckNodePort          int
}

func serviceYAML(o svcOpts) string {
	if o.typ == "" {
		o.typ = "ClusterIP"
	}
	if o.proto == "" {
		o.proto = "TCP"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: v1\nkind: Service\nmetadata:\n  name: %s\n  namespace: e2e\n", o.name)
	if len(o.annotations) > 0 {
		b.WriteString("  annotations:\n")
		for k, v := range o.annotations {
			fmt.Fprintf(&b, "    %s: %q\n", k, v)
		}
	}
	fmt.Fprintf(&b, "spec:\n  type: %s\n  clusterIP: %s\n  clusterIPs: [%s]\n", o.typ, o.clusterIP, o.clusterIP)
	if len(o.externalIPs) > 0 {
		fmt.Fprintf(&b, "  externalIPs: [%s]\n", strings.Join(o.externalIPs, ", "))
	}
	if o.externalLocal {
		fmt.Fprintf(&b, "  externalTrafficPolicy: Local\n  healthCheckNodePort: %d\n", o.healthCheckNodePort)
	}
	if o.internalLocal {
		b.WriteString("  internalTrafficPolicy: Local\n")
	}
	if o.affinity {
		b.WriteString("  sessionAffinity: ClientIP\n  sessionAffinityConfig: {clientIP: {timeoutSeconds: 300}}\n")
	}
	fmt.Fprintf(&b, "  ports:\n  - name: p\n    protocol: %s\n    port: %d\n    targetPort: %d\n", o.proto, o.port, o.targetPort)
	if o.nodePort != 0 {
		fmt.Fprintf(&b, "    nodePort: %d\n", o.nodePort)
	}
	if o.lbIP != "" {
		fmt.Fprintf(&b, "status:\n  loadBalancer:\n    ingress:\n    - ip: %s\n", o.lbIP)
	}
	return b.String()
}

// ep is one endpoint of a slice.
type ep struct {
	ip       string
	notReady bool
	node     string
}

func sliceYAML(svc, name, proto string, port int, family string, eps ...ep) string {
	if proto == "" {
		proto = "TCP"
	}
	if family == "" {
		family = "IPv4"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: %s\n  namespace: e2e\n  labels: {kubernetes.io/service-name: %s}\naddressType: %s\nports:\n- {name: p, protocol: %s, port: %d}\nendpoints:\n", name, svc, family, proto, port)
	for _, e := range eps {
		node := e.node
		if node == "" {
			node = nodeName
		}
		fmt.Fprintf(&b, "- addresses: [%q]\n  conditions: {ready: %v}\n  nodeName: %s\n", e.ip, !e.notReady, node)
	}
	return b.String()
}

func eps(ips ...string) []ep {
	out := make([]ep, len(ips))
	for i, ip := range ips {
		out[i] = ep{ip: ip}
	}
	return out
}

package proxy

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

func one(eps ...discoveryv1.Endpoint) []*discoveryv1.EndpointSlice {
	return []*discoveryv1.EndpointSlice{v4("s1", httpPort, eps...)}
}

const cip = "TCP 10.0.0.1:80 rr"

var bindCIP = []string{"10.0.0.1"}

func TestBuildServiceEndpointConditions(t *testing.T) {
	runBuildCases(t, []buildCase{{
		name:   "nil conditions mean ready",
		svc:    service(),
		slices: one(ep("10.1.0.1")),
		want:   []string{vs(cip, "10.1.0.1:8080")},
		bind:   bindCIP,
	}, {
		name:   "only ready endpoints when some are ready",
		svc:    service(),
		slices: one(ep("10.1.0.1", ready(true)), ep("10.1.0.2", ready(false)), ep("10.1.0.3", draining)),
		want:   []string{vs(cip, "10.1.0.1:8080")},
		bind:   bindCIP,
	}, {
		name: "none ready: serving and terminating ones",
		svc:  service(),
		slices: one(
			ep("10.1.0.1", draining),
			ep("10.1.0.2", ready(false)),                                    // not ready: serving defaults to ready (false)
			ep("10.1.0.3", ready(false), serving(true)),                     // serving but not terminating
			ep("10.1.0.4", ready(false), serving(false), terminating(true)), // terminating, not serving
			ep("10.1.0.5", ready(false), terminating(true)),                 // serving nil = ready = false
		),
		want: []string{vs(cip, "10.1.0.1:8080")},
		bind: bindCIP,
	}, {
		name:   "none ready or draining: VS without real servers",
		svc:    service(),
		slices: one(ep("10.1.0.1", ready(false)), ep("10.1.0.2", ready(false), terminating(true))),
		want:   []string{vs(cip)},
		bind:   bindCIP,
	}, {
		name:   "ready nil and terminating true is still ready",
		svc:    service(),
		slices: one(ep("10.1.0.1", terminating(true)), ep("10.1.0.2", draining)),
		want:   []string{vs(cip, "10.1.0.1:8080")},
		bind:   bindCIP,
	}, {
		name: "no slices: VS without real servers",
		svc:  service(),
		want: []string{vs(cip)},
		bind: bindCIP,
	}, {
		name: "dedupe across slices; a ready copy wins over an earlier not-ready one",
		svc:  service(),
		slices: []*discoveryv1.EndpointSlice{
			v4("s2", httpPort, ep("10.1.0.1"), ep("10.1.0.2", ready(false))),
			v4("s1", httpPort, ep("10.1.0.1"), ep("10.1.0.2", ready(false))),
			v4("s3", httpPort, ep("10.1.0.2")),
		},
		want: []string{vs(cip, "10.1.0.1:8080", "10.1.0.2:8080")},
		bind: bindCIP,
	}, {
		name: "dedupe: a draining copy does not turn a ready endpoint into a fallback",
		svc:  service(),
		slices: []*discoveryv1.EndpointSlice{
			v4("s1", httpPort, ep("10.1.0.1", draining)),
			v4("s2", httpPort, ep("10.1.0.1"), ep("10.1.0.2", draining)),
		},
		want: []string{vs(cip, "10.1.0.1:8080")},
		bind: bindCIP,
	}, {
		name: "dedupe: a later not-ready copy does not override a ready one",
		svc:  service(),
		slices: []*discoveryv1.EndpointSlice{
			v4("s1", httpPort, ep("10.1.0.1")),
			v4("s2", httpPort, ep("10.1.0.1", ready(false)), ep("10.1.0.2", draining)),
		},
		want: []string{vs(cip, "10.1.0.1:8080")},
		bind: bindCIP,
	}, {
		name: "dedupe: equal copies, the first slice by name decides locality",
		svc:  service(itpLocal),
		slices: []*discoveryv1.EndpointSlice{
			v4("s2", httpPort, ep("10.1.0.1")),
			v4("s1", httpPort, ep("10.1.0.1", local)),
		},
		want: []string{vs(cip, "10.1.0.1:8080")},
		bind: bindCIP,
	}, {
		name: "same address with different ports are different real servers",
		svc:  service(),
		slices: []*discoveryv1.EndpointSlice{
			v4("s1", epPorts(sp("http", v1.ProtocolTCP, 8080)), ep("10.1.0.1")),
			v4("s2", epPorts(sp("http", v1.ProtocolTCP, 8081)), ep("10.1.0.1")),
		},
		want: []string{vs(cip, "10.1.0.1:8080", "10.1.0.1:8081")},
		bind: bindCIP,
	}, {
		name:   "only the first address of an endpoint is used",
		svc:    service(),
		slices: one(discoveryv1.Endpoint{Addresses: []string{"10.1.0.1", "10.1.0.2"}}),
		want:   []string{vs(cip, "10.1.0.1:8080")},
		bind:   bindCIP,
	}})
}

func TestBuildServiceTrafficPolicy(t *testing.T) {
	// node-a is this node; 10.1.0.1 is local, 10.1.0.2 remote, 10.1.0.3 has no nodeName.
	mixed := one(ep("10.1.0.1", local), ep("10.1.0.2"), ep("10.1.0.3", noNode))
	remoteOnly := one(ep("10.1.0.2"))
	ext := func(opts ...svcOpt) *v1.Service {
		return service(append([]svcOpt{externalIPs("192.0.2.1"), lb("203.0.113.1"), ports(tcp("http", 80, 30080))}, opts...)...)
	}
	cfg := config(nodeIPs("192.168.1.10"))
	all := []string{"10.1.0.1:8080", "10.1.0.2:8080", "10.1.0.3:8080"}
	// The firewall-mark virtual server of in-cluster traffic to the external addresses:
	// nodePort 30080 (0x7580), our bit, TCP.
	inCluster := "FWM 0x75802001 IPv4 rr"
	bind := []string{"10.0.0.1", "192.0.2.1", "203.0.113.1"}
	runBuildCases(t, []buildCase{{
		name: "Cluster policies: every VS gets every endpoint",
		svc:  ext(), slices: mixed, cfg: cfg,
		want: []string{
			vs(cip, all...),
			vs("TCP 192.0.2.1:80 rr", all...),
			vs("TCP 192.168.1.10:30080 rr", all...),
			vs("TCP 203.0.113.1:80 rr", all...),
		},
		bind: bind,
	}, {
		name: "eTP Local: external, LB and NodePort VSes local only; ClusterIP and in-cluster all",
		svc:  ext(etpLocal), slices: mixed, cfg: cfg,
		want: []string{
			vs(inCluster, all...),
			vs(cip, all...),
			vs("TCP 192.0.2.1:80 rr", "10.1.0.1:8080"),
			vs("TCP 192.168.1.10:30080 rr", "10.1.0.1:8080"),
			vs("TCP 203.0.113.1:80 rr", "10.1.0.1:8080"),
		},
		bind: bind,
	}, {
		name: "iTP Local: ClusterIP VS local only; external ones all",
		svc:  ext(itpLocal), slices: mixed, cfg: cfg,
		want: []string{
			vs(cip, "10.1.0.1:8080"),
			vs("TCP 192.0.2.1:80 rr", all...),
			vs("TCP 192.168.1.10:30080 rr", all...),
			vs("TCP 203.0.113.1:80 rr", all...),
		},
		bind: bind,
	}, {
		name: "eTP and iTP Local: every address VS local only; in-cluster traffic to external addresses all",
		svc:  ext(etpLocal, itpLocal), slices: mixed, cfg: cfg,
		want: []string{
			vs(inCluster, all...),
			vs(cip, "10.1.0.1:8080"),
			vs("TCP 192.0.2.1:80 rr", "10.1.0.1:8080"),
			vs("TCP 192.168.1.10:30080 rr", "10.1.0.1:8080"),
			vs("TCP 203.0.113.1:80 rr", "10.1.0.1:8080"),
		},
		bind: bind,
	}, {
		name: "eTP Local with no local endpoint: external VSes empty, in-cluster ones remote",
		svc:  ext(etpLocal), slices: remoteOnly, cfg: cfg,
		want: []string{
			vs(inCluster, "10.1.0.2:8080"),
			vs(cip, "10.1.0.2:8080"),
			vs("TCP 192.0.2.1:80 rr"),
			vs("TCP 192.168.1.10:30080 rr"),
			vs("TCP 203.0.113.1:80 rr"),
		},
		bind: bind,
	}, {
		name: "eTP Local: local draining endpoint used although remote ones are ready",
		svc:  ext(etpLocal), cfg: cfg,
		slices: one(ep("10.1.0.1", local, draining), ep("10.1.0.2")),
		want: []string{
			vs(inCluster, "10.1.0.2:8080"),
			vs(cip, "10.1.0.2:8080"),
			vs("TCP 192.0.2.1:80 rr", "10.1.0.1:8080"),
			vs("TCP 192.168.1.10:30080 rr", "10.1.0.1:8080"),
			vs("TCP 203.0.113.1:80 rr", "10.1.0.1:8080"),
		},
		bind: bind,
	}, {
		name:   "address both ClusterIP and externalIP: the ClusterIP VS (and its policy) wins",
		svc:    service(etpLocal, externalIPs("10.0.0.1", "192.0.2.1")),
		slices: mixed,
		want:   []string{vs(cip, all...), vs("TCP 192.0.2.1:80 rr", "10.1.0.1:8080")},
		bind:   []string{"10.0.0.1", "192.0.2.1"},
	}, {
		name:   "iTP Local with empty NodeName: nothing is local",
		svc:    service(itpLocal),
		slices: one(ep("10.1.0.3", noNode), ep("10.1.0.4", on(""))),
		cfg:    &Config{},
		want:   []string{vs(cip)},
		bind:   bindCIP,
	}})
}

func TestBuildServiceTopology(t *testing.T) {
	inZone := config(zone("z1"))
	runBuildCases(t, []buildCase{{
		name:   "zone hints: all hinted, keep those for our zone",
		svc:    service(),
		slices: one(ep("10.1.0.1", zones("z1")), ep("10.1.0.2", zones("z2")), ep("10.1.0.3", zones("z2", "z1"))),
		cfg:    inZone,
		want:   []string{vs(cip, "10.1.0.1:8080", "10.1.0.3:8080")},
		bind:   bindCIP,
	}, {
		name:   "zone hints: partial hints, use all endpoints",
		svc:    service(),
		slices: one(ep("10.1.0.1", zones("z1")), ep("10.1.0.2")),
		cfg:    inZone,
		want:   []string{vs(cip, "10.1.0.1:8080", "10.1.0.2:8080")},
		bind:   bindCIP,
	}, {
		name:   "zone hints: empty hints struct counts as unhinted",
		svc:    service(),
		slices: one(ep("10.1.0.1", zones("z1")), ep("10.1.0.2", zones())),
		cfg:    inZone,
		want:   []string{vs(cip, "10.1.0.1:8080", "10.1.0.2:8080")},
		bind:   bindCIP,
	}, {
		name:   "zone hints: our zone not covered, use all endpoints",
		svc:    service(),
		slices: one(ep("10.1.0.1", zones("z2")), ep("10.1.0.2", zones("z3"))),
		cfg:    inZone,
		want:   []string{vs(cip, "10.1.0.1:8080", "10.1.0.2:8080")},
		bind:   bindCIP,
	}, {
		name:   "zone hints: node without zone ignores them",
		svc:    service(),
		slices: one(ep("10.1.0.1", zones("z1")), ep("10.1.0.2", zones("z2"))),
		want:   []string{vs(cip, "10.1.0.1:8080", "10.1.0.2:8080")},
		bind:   bindCIP,
	}, {
		name: "zone hints: only ready endpoints are considered (unhinted not-ready one does not matter)",
		svc:  service(),
		slices: one(ep("10.1.0.1", zones("z1")), ep("10.1.0.2", zones("z2")),
			ep("10.1.0.3", ready(false))),
		cfg:  inZone,
		want: []string{vs(cip, "10.1.0.1:8080")},
		bind: bindCIP,
	}, {
		name:   "zone hints: not applied to the draining fallback",
		svc:    service(),
		slices: one(ep("10.1.0.1", draining, zones("z1")), ep("10.1.0.2", draining, zones("z2"))),
		cfg:    inZone,
		want:   []string{vs(cip, "10.1.0.1:8080", "10.1.0.2:8080")},
		bind:   bindCIP,
	}, {
		name: "zone hints: not applied where the traffic policy is Local",
		svc:  service(itpLocal, externalIPs("192.0.2.1")),
		slices: one(ep("10.1.0.1", local, zones("z2")), ep("10.1.0.2", local, zones("z1")),
			ep("10.1.0.3", zones("z1"))),
		cfg: inZone,
		want: []string{
			vs(cip, "10.1.0.1:8080", "10.1.0.2:8080"),
			vs("TCP 192.0.2.1:80 rr", "10.1.0.2:8080", "10.1.0.3:8080"),
		},
		bind: []string{"10.0.0.1", "192.0.2.1"},
	}, {
		name:   "zone hints: applied to external VSes with eTP Cluster, also NodePort",
		svc:    service(ports(tcp("http", 80, 30080))),
		slices: one(ep("10.1.0.1", zones("z1")), ep("10.1.0.2", zones("z2"))),
		cfg:    config(zone("z1"), nodeIPs("192.168.1.10")),
		want: []string{
			vs(cip, "10.1.0.1:8080"),
			vs("TCP 192.168.1.10:30080 rr", "10.1.0.1:8080"),
		},
		bind: bindCIP,
	}, {
		name:   "node hints: all hinted, keep those for this node",
		svc:    service(),
		slices: one(ep("10.1.0.1", nodes(thisNode)), ep("10.1.0.2", nodes("node-b")), ep("10.1.0.3", nodes("node-b", thisNode))),
		want:   []string{vs(cip, "10.1.0.1:8080", "10.1.0.3:8080")},
		bind:   bindCIP,
	}, {
		name: "node hints take precedence over zone hints",
		svc:  service(),
		slices: one(ep("10.1.0.1", nodes(thisNode), zones("z2")), ep("10.1.0.2", nodes("node-b"), zones("z1")),
			ep("10.1.0.3", nodes("node-c"), zones("z1"))),
		cfg:  inZone,
		want: []string{vs(cip, "10.1.0.1:8080")},
		bind: bindCIP,
	}, {
		name:   "node hints not for this node: fall back to zone hints",
		svc:    service(),
		slices: one(ep("10.1.0.1", nodes("node-b"), zones("z1")), ep("10.1.0.2", nodes("node-c"), zones("z2"))),
		cfg:    inZone,
		want:   []string{vs(cip, "10.1.0.1:8080")},
		bind:   bindCIP,
	}, {
		name:   "partial node hints: fall back to zone hints",
		svc:    service(),
		slices: one(ep("10.1.0.1", nodes(thisNode), zones("z2")), ep("10.1.0.2", zones("z1"))),
		cfg:    inZone,
		want:   []string{vs(cip, "10.1.0.2:8080")},
		bind:   bindCIP,
	}, {
		name:   "node hints: not covered and no zone: use all",
		svc:    service(),
		slices: one(ep("10.1.0.1", nodes("node-b")), ep("10.1.0.2", nodes("node-c"))),
		want:   []string{vs(cip, "10.1.0.1:8080", "10.1.0.2:8080")},
		bind:   bindCIP,
	}})
}

package model

// Firewall marks for in-cluster traffic to externalTrafficPolicy: Local Services.
//
// Outside clients of such a Service reach only this node's endpoints and keep their
// address; pods and the node itself must reach every endpoint (in-cluster traffic is
// cluster-wide), even on a node with no local endpoint. IPVS looks a packet up by its
// firewall mark before it looks it up by address and port, so the firewall marks in-cluster
// packets to each such address and port (an ipset entry carries the mark) and a
// firewall-mark virtual server with all endpoints takes them, while the address virtual
// server with the local endpoints serves everyone else.
//
// IPVS matches the whole mark, so each Service port needs its own, and it must be the same
// on every restart (the kernel state is adopted) without any allocation state. Node ports
// give that: the API server allocates every nodePort and healthCheckNodePort from one range,
// unique in the cluster (one Service may use one number for TCP and UDP). The layout:
//
//	bits 16-31  the port's nodePort, or for a load balancer without node ports
//	            (allocateLoadBalancerNodePorts: false) the Service's healthCheckNodePort
//	bit  13     InClusterMarkBit, on every mark of ours
//	bits 2-12   0 with a nodePort; with the health-check node port, the port's index + 1
//	bits 0-1    the protocol: 1 TCP, 2 UDP, 3 SCTP
//
// Bits 14 and 15 stay clear: kube-proxy (and kube-ipvs's own default) ask for masquerade
// with 0x4000 and kube-proxy drops with 0x8000.
const (
	InClusterMarkBit uint32 = 0x2000
	inClusterIndexes        = 1<<11 - 1
)

var markProtocols = map[Protocol]uint32{TCP: 1, UDP: 2, SCTP: 3}

// InClusterMark returns the mark of a Service port: by its nodePort (index < 0) or by the
// Service's health-check node port and the port's index. 0 if the port cannot have one (no
// port number, an index beyond the layout, an unknown protocol).
func InClusterMark(port uint16, proto Protocol, index int) uint32 {
	p, ok := markProtocols[proto]
	if port == 0 || !ok || index >= inClusterIndexes {
		return 0
	}
	m := uint32(port)<<16 | InClusterMarkBit | p
	if index >= 0 {
		m |= uint32(index+1) << 2
	}
	return m
}

// IsInClusterMark reports whether m has the layout of InClusterMark: only such firewall-mark
// virtual servers are the proxy's.
func IsInClusterMark(m uint32) bool {
	return m>>16 != 0 && m&0xc000 == 0 && m&InClusterMarkBit != 0 && m&3 != 0
}

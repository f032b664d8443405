// Package bench is kube-ipvs' scale bench: it feeds synthetic Services and EndpointSlices
// through the production path (client-go's fake clientset, the informers, controller.New and
// the real IPVS, kube-ipvs0, ipset and iptables reconcilers of package dataplane/ipvsmode, as
// cmd/kube-ipvs builds them) inside the QEMU guest, measures cold start and single changes
// against the kernel, and renders BENCHMARKS.md and a chart from the results.
//
// `make bench` runs it (hack/bench.sh); it is not part of `make test`.
package bench

import (
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/kube-ipvs/kube-ipvs/model"
)

// The synthetic cluster. Service i has:
//   - ClusterIP 10.96.0.0 + i + 1 (10.96.0.0/12 holds a million), port 80/TCP "http"
//     (target 8080);
//   - when i%10 == 1 (10%) a second port 443/TCP "https" (target 8443);
//   - when i%5 == 1 (20%, half of them with two ports) type NodePort, node ports from
//     NodePortBase (a range wider than the default 30000-32767: 50,000 Services need about
//     15,000 node ports, and the bench sets --service-node-port-range to match);
//   - one EndpointSlice with EndpointsPerService ready endpoints, 10.128.0.0 + 16*i + j,
//     on other nodes (j < 10; j = 10..15 are free for the endpoint changes).
const (
	Namespace           = "bench"
	NodeName            = "bench-node"
	EndpointsPerService = 10
	NodePortBase        = 30000
	NodePortMax         = 59999
)

var (
	clusterBase  = netip.MustParseAddr("10.96.0.0")
	endpointBase = netip.MustParseAddr("10.128.0.0")
	// NodeIP is the node's address (on a link the bench script creates in its network
	// namespace): NodePort virtual servers live there.
	NodeIP = netip.MustParseAddr("192.168.50.10")
	// ClusterCIDR is the pod network (--cluster-cidr).
	ClusterCIDR = netip.MustParsePrefix("10.128.0.0/9")
)

// Shape is what one synthetic Service looks like.
type Shape struct {
	TwoPorts, NodePort bool
}

// ShapeOf returns Service i's shape.
func ShapeOf(i int) Shape { return Shape{TwoPorts: i%10 == 1, NodePort: i%5 == 1} }

// Ports is the number of Service ports.
func (s Shape) Ports() int {
	if s.TwoPorts {
		return 2
	}
	return 1
}

// VirtualServers is the number of IPVS virtual servers the Service gets on a node with one
// node IP: one per port on the ClusterIP, and one per port on the node IP for a NodePort.
func (s Shape) VirtualServers() int {
	if s.NodePort {
		return 2 * s.Ports()
	}
	return s.Ports()
}

func addrAdd(base netip.Addr, n int) netip.Addr {
	b := base.As4()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	v += uint32(n)
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// ServiceName is Service i's name.
func ServiceName(i int) string { return fmt.Sprintf("svc-%06d", i) }

// ClusterIP is Service i's ClusterIP.
func ClusterIP(i int) netip.Addr { return addrAdd(clusterBase, i+1) }

// EndpointIP is endpoint j of Service i (j < 16).
func EndpointIP(i, j int) netip.Addr { return addrAdd(endpointBase, 16*i+j) }

// NodePort is the node port of port p (0 or 1) of Service i, 0 if it has none.
func NodePort(i, p int) uint16 {
	if !ShapeOf(i).NodePort {
		return 0
	}
	return uint16(NodePortBase + 2*(i/5) + p)
}

// HTTPKey is the virtual server of Service i's first port on its ClusterIP.
func HTTPKey(i int) model.VSKey { return model.VSKey{Addr: ClusterIP(i), Proto: model.TCP, Port: 80} }

// RealServer is endpoint j of Service i as a real server of its first port.
func RealServer(i, j int) model.RSKey { return model.RSKey{Addr: EndpointIP(i, j), Port: 8080} }

// Service returns Service i.
func Service(i int) *corev1.Service {
	sh := ShapeOf(i)
	ip := ClusterIP(i).String()
	svc := &corev1.Service{
		TypeMeta:   metav1.TypeMeta{Kind: "Service", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: ServiceName(i), UID: uid("s", i)},
		Spec: corev1.ServiceSpec{
			Type:       corev1.ServiceTypeClusterIP,
			ClusterIP:  ip,
			ClusterIPs: []string{ip},
			IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol},
			Ports: []corev1.ServicePort{
				{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080)},
			},
			SessionAffinity: corev1.ServiceAffinityNone,
		},
	}
	if sh.TwoPorts {
		svc.Spec.Ports = append(svc.Spec.Ports,
			corev1.ServicePort{Name: "https", Protocol: corev1.ProtocolTCP, Port: 443, TargetPort: intstr.FromInt32(8443)})
	}
	if sh.NodePort {
		svc.Spec.Type = corev1.ServiceTypeNodePort
		svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster
		for p := range svc.Spec.Ports {
			svc.Spec.Ports[p].NodePort = int32(NodePort(i, p))
		}
	}
	return svc
}

// EndpointSlice returns Service i's EndpointSlice with the endpoints js (EndpointIP(i, j)).
func EndpointSlice(i int, js ...int) *discoveryv1.EndpointSlice {
	sh := ShapeOf(i)
	s := &discoveryv1.EndpointSlice{
		TypeMeta: metav1.TypeMeta{Kind: "EndpointSlice", APIVersion: "discovery.k8s.io/v1"},
		ObjectMeta: metav1.ObjectMeta{
			Namespace: Namespace, Name: ServiceName(i) + "-x7k2p", UID: uid("e", i),
			Labels: map[string]string{
				discoveryv1.LabelServiceName: ServiceName(i),
				discoveryv1.LabelManagedBy:   "endpointslice-controller.k8s.io",
			},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To[int32](8080)}},
	}
	if sh.TwoPorts {
		s.Ports = append(s.Ports, discoveryv1.EndpointPort{Name: ptr.To("https"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To[int32](8443)})
	}
	for _, j := range js {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{EndpointIP(i, j).String()},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)},
			NodeName:   ptr.To(fmt.Sprintf("node-%03d", (i+j)%500)),
		})
	}
	return s
}

// DefaultEndpoints are the endpoint numbers of a Service as populated.
func DefaultEndpoints() []int {
	js := make([]int, EndpointsPerService)
	for j := range js {
		js[j] = j
	}
	return js
}

// Node is this node's object.
func Node() *corev1.Node {
	return &corev1.Node{
		TypeMeta:   metav1.TypeMeta{Kind: "Node", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{Name: NodeName, Labels: map[string]string{corev1.LabelHostname: NodeName}},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: NodeIP.String()},
			{Type: corev1.NodeHostName, Address: NodeName},
		}},
	}
}

func uid(kind string, i int) types.UID {
	return types.UID(fmt.Sprintf("00000000-0000-4000-%s000-%012d", kind, i))
}

// Expected is the kernel state n Services must produce.
type Expected struct {
	Services, VirtualServers, RealServers, Addresses int
	// Set entries: ClusterIP,proto:port; nodeIP,proto:nodePort; VIPs; endpoint hairpins.
	ClusterIPEntries, NodePortEntries, VIPEntries, LoopBackEntries int
}

// Expect returns what n Services with EndpointsPerService endpoints each must produce.
func Expect(n int) Expected {
	e := Expected{Services: n, Addresses: n, VIPEntries: n}
	for i := range n {
		sh := ShapeOf(i)
		e.VirtualServers += sh.VirtualServers()
		e.RealServers += sh.VirtualServers() * EndpointsPerService
		e.ClusterIPEntries += sh.Ports()
		if sh.NodePort {
			e.NodePortEntries += sh.Ports()
		}
		e.LoopBackEntries += sh.Ports() * EndpointsPerService
	}
	return e
}

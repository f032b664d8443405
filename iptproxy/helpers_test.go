package iptproxy

// Builders shared by the unit tests and the guest tests.

import (
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/kube-ipvs/kube-ipvs/model"
	"github.com/kube-ipvs/kube-ipvs/proxy"
)

const testNode = "node-a"

// svcOpts describes a Service with one port named "p" (target port 8080 unless set).
type svcOpts struct {
	name        string
	clusterIPs  []string
	typ         corev1.ServiceType
	proto       corev1.Protocol
	port        int32
	targetPort  int32
	nodePort    int32
	externalIPs []string
	lbIPs       []string
	ranges      []string
	local       bool  // externalTrafficPolicy Local
	itpLocal    bool  // internalTrafficPolicy Local
	affinity    int32 // ClientIP timeout seconds; 0 none
	healthPort  int32
}

func makeService(o svcOpts) *corev1.Service {
	if o.typ == "" {
		o.typ = corev1.ServiceTypeClusterIP
	}
	if o.proto == "" {
		o.proto = corev1.ProtocolTCP
	}
	if o.targetPort == 0 {
		o.targetPort = 8080
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: o.name},
		Spec: corev1.ServiceSpec{
			Type: o.typ, ClusterIP: o.clusterIPs[0], ClusterIPs: o.clusterIPs,
			Ports: []corev1.ServicePort{{Name: "p", Protocol: o.proto, Port: o.port, NodePort: o.nodePort,
				TargetPort: intstr.FromInt32(o.targetPort)}},
			ExternalIPs:              o.externalIPs,
			LoadBalancerSourceRanges: o.ranges,
			HealthCheckNodePort:      o.healthPort,
		},
	}
	if o.local {
		svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	} else if o.typ == corev1.ServiceTypeNodePort || o.typ == corev1.ServiceTypeLoadBalancer {
		svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster
	}
	if o.itpLocal {
		p := corev1.ServiceInternalTrafficPolicyLocal
		svc.Spec.InternalTrafficPolicy = &p
	}
	if o.affinity > 0 {
		svc.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
		svc.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: &o.affinity}}
	}
	for _, ip := range o.lbIPs {
		svc.Status.LoadBalancer.Ingress = append(svc.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: ip})
	}
	return svc
}

// ep is an endpoint address and whether it runs on this node.
type ep struct {
	ip    string
	local bool
}

// makeSlice returns the EndpointSlice of a Service with ready endpoints of one family on
// the given target port.
func makeSlice(svc *corev1.Service, port int32, eps ...ep) *discoveryv1.EndpointSlice {
	at := discoveryv1.AddressTypeIPv4
	if len(eps) > 0 && netip.MustParseAddr(eps[0].ip).Is6() {
		at = discoveryv1.AddressTypeIPv6
	}
	name, proto := "p", svc.Spec.Ports[0].Protocol
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: svc.Namespace, Name: svc.Name + "-" + string(at), Labels: map[string]string{discoveryv1.LabelServiceName: svc.Name}},
		AddressType: at,
		Ports:       []discoveryv1.EndpointPort{{Name: &name, Port: &port, Protocol: &proto}},
	}
	for _, e := range eps {
		node := "node-b"
		if e.local {
			node = testNode
		}
		ready := true
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{e.ip}, NodeName: &node,
			Conditions: discoveryv1.EndpointConditions{Ready: &ready}})
	}
	return s
}

func build(svc *corev1.Service, nodeIPs []netip.Addr, slices ...*discoveryv1.EndpointSlice) *model.ServiceState {
	return proxy.BuildService(svc, slices, &proxy.Config{DefaultScheduler: "rr", NodeName: testNode, NodeIPs: nodeIPs})
}

func nameOf(svc *corev1.Service) model.ServiceName {
	return model.ServiceName{Namespace: svc.Namespace, Name: svc.Name}
}

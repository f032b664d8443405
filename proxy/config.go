// Package proxy computes the desired kernel state of one Service: a pure function of the
// Service, its EndpointSlices, the node and the proxy's configuration. No I/O, no clock, no
// logging: problems with the input come back as model.Problem values.
package proxy

import (
	"net/netip"

	"github.com/kube-ipvs/kube-ipvs/model"
)

// Annotations read from Services.
const (
	AnnotationScheduler      = "kube-ipvs.io/scheduler"
	AnnotationSchedulerFlags = "kube-ipvs.io/scheduler-flags"
)

// Config is what BuildService needs besides the Service and its EndpointSlices.
type Config struct {
	// DefaultScheduler is used when a Service names none, or names one that is invalid or
	// that the kernel lacks (`--scheduler`, rr by default).
	DefaultScheduler string
	// UnavailableSchedulers are schedulers the kernel refused (no module): Services asking
	// for them get DefaultScheduler and a Problem.
	UnavailableSchedulers map[string]bool
	// NoSchedulers says the node runs the iptables fallback, which balances randomly: a
	// scheduler annotation has no effect there, and a Problem says so.
	NoSchedulers bool
	// NodeName is this node's name: endpoints with this nodeName are local.
	NodeName string
	// NodeZone is the node's topology.kubernetes.io/zone label ("" if none).
	NodeZone string
	// NodeIPs are the addresses that get a virtual server per NodePort (already filtered by
	// --nodeport-addresses; see NodePortAddresses).
	NodeIPs []netip.Addr
	// HostAddrs are every address of the node's interfaces other than kube-ipvs0. A Service
	// address among them is the node's own: it is never bound to kube-ipvs0 or filtered.
	HostAddrs map[netip.Addr]bool
	// NoHealthChecks says the node runs the iptables fallback, which cannot weigh
	// endpoints: a health-check annotation has no effect there, and a Problem says so.
	NoHealthChecks bool
	// Unhealthy are the endpoints (IP and target port) of each Service that its health
	// check found failing: the checker's verdicts, an input like the EndpointSlices. They
	// get weight 0 unless every endpoint of a virtual server is in it (fail open).
	Unhealthy map[model.ServiceName]map[model.RSKey]bool
}

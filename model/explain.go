package model

// EndpointChoice is how package proxy judged one endpoint of one Service port for the
// virtual servers of one address family and traffic policy: chosen as a real server, or
// left out and why. It is what `kube-ipvs explain` shows; nothing programs the kernel from
// it.
type EndpointChoice struct {
	PortName string
	// Local: the choice of the virtual servers with a node-local traffic policy
	// (internalTrafficPolicy for ClusterIPs, externalTrafficPolicy for the others).
	Local bool
	RS    RSKey
	// Pod is the EndpointSlice's targetRef name when it refers to a Pod ("" otherwise);
	// Node is the endpoint's nodeName ("" if unset).
	Pod, Node string
	Chosen    bool
	// Why says why the endpoint was left out, or for a chosen one anything unusual about
	// it (serving while terminating); "" for an ordinary chosen endpoint.
	Why string
}

// ChoiceSource works a Service's endpoint choices out again from what its state was built
// from (package proxy keeps that read-only input, which the informers hold anyway). It is
// safe for concurrent use and gives the same choices every time.
type ChoiceSource interface {
	EndpointChoices() []EndpointChoice
}

// Reasons an endpoint is left out (EndpointChoice.Why).
const (
	WhyNotReady         = "not ready"
	WhyTerminating      = "terminating and not serving"
	WhyTerminatingSpare = "serving while terminating, but ready endpoints exist"
	WhyOtherNode        = "traffic policy Local, endpoint on another node"
	WhyTopologyZone     = "topology hints (forZones) are for other zones"
	WhyTopologyNode     = "topology hints (forNodes) are for other nodes"
	WhyFallback         = "serving while terminating: no ready endpoint, so used until it goes"
)

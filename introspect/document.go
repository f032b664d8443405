// Package introspect is the running proxy's local state endpoint: the desired state of
// every Service as the pure core (package proxy) computed it, with what the dataplane adds
// (draining real servers, ipset entries and the fixed rules that match them), as one JSON
// document served on a unix socket, never on a TCP port. `kube-ipvs list` and
// `kube-ipvs explain` read it; Build is pure, so the document is table-tested.
package introspect

import "time"

// DefaultSocket is where `kube-ipvs run` serves the document: under /run/kube-ipvs, which
// the DaemonSet mounts from the host so that `kubectl exec` and the node both reach it.
const DefaultSocket = "/run/kube-ipvs/state.sock"

// Path is the HTTP path of the document on the socket.
const Path = "/v1/state"

// Version is the document's format; a reader refuses another one.
const Version = "kube-ipvs.io/state/v1"

// Document is the proxy's desired state, as served.
type Document struct {
	Version   string    `json:"version"`
	Node      string    `json:"node"`
	Generated time.Time `json:"generated"`
	// Mode is the proxy mode (ipvs or iptables): with iptables there is no IPVS table.
	Mode      string    `json:"mode"`
	Ownership Ownership `json:"ownership"`
	Services  []Service `json:"services"`
}

// Ownership is what decides which kernel virtual servers are the running proxy's (the
// rule of ipvsmode.Config.OwnsVirtualServer), so that list marks drift with the proxy's
// own settings, not flags an operator must repeat.
type Ownership struct {
	DummyInterface string   `json:"dummyInterface"`
	NodePortMin    uint16   `json:"nodePortMin"`
	NodePortMax    uint16   `json:"nodePortMax"`
	ExcludeCIDRs   []string `json:"excludeCIDRs,omitempty"`
	// NodePortCIDRs select the node addresses with NodePorts (empty: every one).
	NodePortCIDRs []string `json:"nodePortCIDRs,omitempty"`
}

// Service is one Service's desired state and the reasons behind it.
type Service struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Scheduler string `json:"scheduler"`
	// Flags are the scheduler flags by name (sh-fallback, sh-port, mh-...), persistence
	// aside.
	Flags []string `json:"flags,omitempty"`
	// Persistence is the sessionAffinity ClientIP timeout in seconds (0: none).
	Persistence    uint32          `json:"persistence,omitempty"`
	ExternalLocal  bool            `json:"externalTrafficPolicyLocal,omitempty"`
	VIPs           []VIP           `json:"vips"`
	VirtualServers []VirtualServer `json:"virtualServers"`
	Endpoints      []Endpoint      `json:"endpoints"`
	// SetEntries are the Service's ipset entries, "SET ENTRY" as `ipset list` shows them.
	SetEntries []string `json:"setEntries,omitempty"`
	// Rules are the fixed iptables rules that match those sets (one rule serves every
	// Service: the entries are what make it apply to this one).
	Rules    []string  `json:"rules,omitempty"`
	Problems []Problem `json:"problems,omitempty"`
	// HealthCheck is the Service's opt-in backend health check (kube-ipvs.io/health-check),
	// with each checked endpoint's state; nil when it asks for none.
	HealthCheck *HealthCheck `json:"healthCheck,omitempty"`
}

// HealthCheck is how the node checks a Service's endpoints, and what it found.
type HealthCheck struct {
	Probe              string  `json:"probe"` // "tcp" or "http:/path"
	IntervalSeconds    float64 `json:"intervalSeconds"`
	TimeoutSeconds     float64 `json:"timeoutSeconds"`
	HealthyThreshold   int     `json:"healthyThreshold"`
	UnhealthyThreshold int     `json:"unhealthyThreshold"`
	Endpoints          []Check `json:"endpoints"`
}

// Check is one endpoint's check state. State is "healthy", "unhealthy" (at weight 0 while
// other endpoints pass) or "pending" (no verdict from this node's checker yet).
type Check struct {
	Address   string    `json:"address"`
	State     string    `json:"state"`
	Checks    int       `json:"checks"`
	LastCheck time.Time `json:"lastCheck,omitzero"`
	LastError string    `json:"lastError,omitempty"`
}

// VIP is one address of a Service and how the node holds it.
type VIP struct {
	Address string `json:"address"`
	Kind    string `json:"kind"`
	// Binding: "kube-ipvs0" (bound there by the proxy), "node address" (already on an
	// interface of the node), or "node IP" (a NodePort on a node address).
	Binding string `json:"binding"`
}

// Binding values of VIP.
const (
	BoundDummy    = "kube-ipvs0"
	BoundNodeAddr = "node address"
	BoundNodeIP   = "node IP"
)

// VirtualServer is one desired IPVS virtual server.
type VirtualServer struct {
	Protocol string `json:"protocol"`
	Address  string `json:"address"` // address:port, [v6]:port; 0.0.0.0:0 or [::]:0 with FWMark
	// FWMark: a firewall-mark virtual server (the in-cluster path of an
	// externalTrafficPolicy: Local port), of Address's family; Protocol is then empty.
	FWMark      uint32   `json:"fwmark,omitempty"`
	Kind        string   `json:"kind"`
	PortName    string   `json:"portName"`
	Scheduler   string   `json:"scheduler"`
	Flags       []string `json:"flags,omitempty"`
	Persistence uint32   `json:"persistence,omitempty"`
	Reals       []Real   `json:"reals"`
}

// Real is one real server the proxy wants (or lets drain).
type Real struct {
	Address string `json:"address"`
	Weight  uint32 `json:"weight"`
	Pod     string `json:"pod,omitempty"`
	Node    string `json:"node,omitempty"`
	// Draining: the endpoint is gone and the real server waits at weight 0 for its
	// connections to end, at most DrainSecondsLeft more.
	Draining         bool    `json:"draining,omitempty"`
	DrainSecondsLeft float64 `json:"drainSecondsLeft,omitempty"`
}

// Endpoint is how one endpoint was judged for one port and traffic policy.
type Endpoint struct {
	PortName string `json:"portName"`
	// Policy is "Cluster" or "Local": the traffic policy of the virtual servers the choice
	// is for.
	Policy  string `json:"policy"`
	Address string `json:"address"`
	Pod     string `json:"pod,omitempty"`
	Node    string `json:"node,omitempty"`
	Chosen  bool   `json:"chosen"`
	Why     string `json:"why,omitempty"`
}

// Problem is something wrong with the Service that the proxy worked around, as its
// Warning Event says.
type Problem struct {
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

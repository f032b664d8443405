package controller

import (
	"net/netip"
	"time"

	"github.com/kube-ipvs/kube-ipvs/backendcheck"
	"github.com/kube-ipvs/kube-ipvs/internal/foreground"
)

// Config is the controller's part of the proxy configuration.
type Config struct {
	// NodeName is this node (--hostname-override); its Node object gives the zone.
	NodeName string
	// DefaultScheduler for Services that name none or an unusable one (--scheduler).
	DefaultScheduler string
	// SyncPeriod is how often everything is compared with the kernel and repaired.
	SyncPeriod time.Duration
	// MinSyncPeriod is the shortest time between two syncs: changes arriving faster are
	// coalesced into one sync.
	MinSyncPeriod time.Duration
	// NodePortAddresses selects the node IPs that get NodePort virtual servers (empty: every
	// address but loopback, link-local and kube-ipvs0's).
	NodePortAddresses []netip.Prefix
	// NodePortPrimary gives NodePorts to the Node object's InternalIP addresses too
	// (kube-proxy's nodePortAddresses keyword primary); with it, an empty
	// NodePortAddresses means those addresses alone.
	NodePortPrimary bool
	// PrimaryNodeIP (--bind-address), when valid, stands for the Node object's InternalIPs of
	// its family in NodePortPrimary, as kube-proxy's bindAddress does.
	PrimaryNodeIP netip.Addr
	// ConfigSyncPeriod is the informers' resync period (--config-sync-period; 0: none): every
	// cached object is delivered again, and its Service recomputed.
	ConfigSyncPeriod time.Duration
	// NoSchedulers says the dataplane ignores IPVS schedulers (the iptables fallback, which
	// balances randomly): a Service that asks for one is told so by a Warning Event.
	NoSchedulers bool
	// ServiceCIDRs (--service-cidr) are the Service CIDRs when the API server has no
	// ServiceCIDR objects (or does not serve them): new connections to an address there
	// that no Service holds are refused.
	ServiceCIDRs []netip.Prefix
	// MaxRetryBackoff caps the wait between retries of failed kernel calls.
	MaxRetryBackoff time.Duration
	// BackendChecks runs the Services' opt-in backend health checks (nil: none; a Service
	// asking for them then simply is not checked). Run starts it.
	BackendChecks *backendcheck.Checker
	// Gate is the process's foreground gate (package foreground): the loop raises it while
	// changes are due or being applied, and the dataplane's background listings park at it.
	// nil: none (nothing parks).
	Gate *foreground.Gate
	// RepairStep is how many Services, then virtual servers, one step of a periodic repair
	// handles before the loop applies waiting changes (--repair-step); 0 repairs in one go.
	// A dataplane whose repair is one step (the iptables fallback) is run with 0.
	RepairStep int
}

package config

import (
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/kube-ipvs/kube-ipvs/dummyif"
	"github.com/kube-ipvs/kube-ipvs/healthcheck"
	"github.com/kube-ipvs/kube-ipvs/introspect"
	"github.com/kube-ipvs/kube-ipvs/metrics"
	"github.com/kube-ipvs/kube-ipvs/proxy"
	"github.com/kube-ipvs/kube-ipvs/sysctl"
)

// The proxy modes of --mode.
const (
	ModeAuto     = "auto"     // IPVS when the preflight passes, else the iptables proxier
	ModeIPVS     = "ipvs"     // refuse to run without IPVS
	ModeIPTables = "iptables" // the iptables proxier
)

// DefaultRepairStep is --repair-step's default: a step reads back this many virtual servers
// (one request each), a few milliseconds natively.
const DefaultRepairStep = 200

// Options are the settings of `kube-ipvs run`. AddFlags binds every field to its flag, and
// ReadConfigFile fills the ones the command line left unset from the --config file, through
// the same flags; Validate then checks the result once, whichever source a value came from.
type Options struct {
	ConfigFile        string
	Kubeconfig        string
	Manifests         string
	HostnameOverride  string
	Scheduler         string
	SyncPeriod        time.Duration
	MinSyncPeriod     time.Duration
	RepairStep        int
	NodePortAddresses []string
	NodePortRange     string
	DummyInterface    string
	VIPBinding        string
	Once              bool
	LogLevel          string
	// DrainTimeout is --graceful-termination-timeout.
	DrainTimeout  time.Duration
	TCPTimeout    time.Duration
	TCPFinTimeout time.Duration
	UDPTimeout    time.Duration
	StrictARP     bool
	// RateEstimation is --ipvs-rate-estimation (sysctl.ParseRateEstimation).
	RateEstimation  string
	HealthzAddress  string
	MetricsAddress  string
	StateSocket     string
	HandoverFile    string
	ClusterCIDRs    []string
	ExcludeCIDRs    []string
	ServiceCIDRs    []string
	MasqueradeAll   bool
	IPTablesBackend string
	Mode            string
	// CleanupKubeProxy is --cleanup-kube-proxy: remove kube-proxy's leftovers once the
	// first full sync has put the proxy's own rules in place.
	CleanupKubeProxy bool
	// DetectLocalMode, PodBridgeInterface and PodInterfaceNamePrefix say how traffic from
	// this node's pods is told from other traffic (kube-proxy's detectLocalMode and
	// detectLocal); Validate reads them into Parsed.LocalInterface and LocalFromNode.
	DetectLocalMode        string
	PodBridgeInterface     string
	PodInterfaceNamePrefix string
	// MasqueradeBit is --iptables-masquerade-bit (Parsed.MasqueradeMark).
	MasqueradeBit int
	// BindAddress is --bind-address, kube-proxy's override of the node's primary IP.
	BindAddress string
	// BindAddressHardFail makes a health or metrics server that cannot listen fatal.
	BindAddressHardFail bool
	// The API client's settings (kube-proxy's clientConnection); zero values keep
	// client-go's defaults.
	KubeAPIQPS                float32
	KubeAPIBurst              int
	KubeAPIContentType        string
	KubeAPIAcceptContentTypes string
	// ConfigSyncPeriod is the informers' resync period (0: none).
	ConfigSyncPeriod time.Duration
	// Conntrack holds the --conntrack-* flags, kube-proxy's conntrack section.
	Conntrack ConntrackOptions
	// OOMScoreAdj is --oom-score-adj, written to /proc/self/oom_score_adj at start.
	OOMScoreAdj int
	// LoggingFormat is --logging-format (text or json) and Verbosity is -v, kube-proxy's
	// logging.format and logging.verbosity.
	LoggingFormat string
	Verbosity     int
	// InitOnly is --init-only: do what needs a writable /proc/sys, then exit.
	InitOnly bool
}

// ConntrackOptions are kube-proxy's conntrack settings (sysctl.Conntrack), with its defaults.
type ConntrackOptions struct {
	MaxPerCore, Min                            int
	TCPEstablishedTimeout, TCPCloseWaitTimeout time.Duration
	TCPBeLiberal                               bool
	UDPTimeout, UDPStreamTimeout               time.Duration
}

// kube-proxy's defaults for its conntrack settings and oomScoreAdj.
const (
	DefaultConntrackMaxPerCore = 32768
	DefaultConntrackMin        = 131072
	DefaultOOMScoreAdj         = -999
)

// The logging formats of --logging-format.
const (
	LogFormatText = "text"
	LogFormatJSON = "json"
)

// AddFlags defines the run flags on fs, bound to o, with their defaults and help texts.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.ConfigFile, "config", "", "a KubeIPVSConfiguration or kube-proxy KubeProxyConfiguration file; flags given on the command line override it")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", "", "path to a kubeconfig file (default: none, which means the in-cluster configuration)")
	fs.StringVar(&o.Manifests, "manifests", "", "run without a cluster: read Service, EndpointSlice, ServiceCIDR and Node objects from this YAML/JSON file or folder, re-read on SIGHUP (default: none, watch the API server)")
	fs.StringVar(&o.HostnameOverride, "hostname-override", "", "this node's name, as in its Node object and endpoints' nodeName (default: the host name)")
	fs.StringVar(&o.Scheduler, "scheduler", "rr", "default IPVS scheduler for Services without the "+proxy.AnnotationScheduler+" annotation: "+strings.Join(proxy.Schedulers(), ", "))
	fs.DurationVar(&o.SyncPeriod, "sync-period", 30*time.Second, "how often the kernel state is compared with the desired state and repaired")
	fs.DurationVar(&o.MinSyncPeriod, "min-sync-period", time.Second, "shortest time between two syncs; changes arriving faster are applied together")
	fs.IntVar(&o.RepairStep, "repair-step", DefaultRepairStep, "how many Services, then virtual servers, one step of the periodic repair checks before waiting changes are applied (0: repair in one go, changes wait for it)")
	fs.StringSliceVar(&o.NodePortAddresses, "nodeport-addresses", nil, "CIDRs whose node addresses get NodePort virtual servers, comma-separated, or \"primary\" for the Node object's InternalIPs (default: every address except loopback, link-local and the dummy interface's)")
	fs.StringVar(&o.NodePortRange, "service-node-port-range", DefaultNodePortRange, "the cluster's NodePort range; NodePort virtual servers on node IPs inside it are the proxy's own")
	fs.StringVar(&o.DummyInterface, "dummy-interface", DefaultDummyInterface, "the dummy interface that holds the Service addresses")
	fs.StringVar(&o.VIPBinding, "vip-binding", string(dummyif.BindAddress), "how Service VIPs are made local: address (addresses of the dummy interface, as kube-proxy; `ip addr show kube-ipvs0`) or route (local routes through it, `ip route show table local dev kube-ipvs0`: binds tens of thousands of VIPs many times faster)")
	fs.DurationVar(&o.DrainTimeout, "graceful-termination-timeout", 30*time.Second, "how long a removed TCP endpoint keeps its open connections at weight 0 before it is deleted (0: delete at once)")
	fs.DurationVar(&o.TCPTimeout, "ipvs-tcp-timeout", 0, "IPVS timeout of idle established TCP connections, as ipvsadm --set (0: leave the kernel's)")
	fs.DurationVar(&o.TCPFinTimeout, "ipvs-tcpfin-timeout", 0, "IPVS timeout of TCP connections after a FIN, as ipvsadm --set (0: leave the kernel's)")
	fs.DurationVar(&o.UDPTimeout, "ipvs-udp-timeout", 0, "IPVS timeout of UDP flows, as ipvsadm --set (0: leave the kernel's)")
	fs.StringVar(&o.RateEstimation, "ipvs-rate-estimation", string(sysctl.RateEstimationKernel), "net.ipv4.vs.run_estimation: kernel (leave it as it is, as kube-proxy does), on, or off (the rates of ipvsadm --rate stop, and so do the --stats counters, which the same rounds sum). Before Linux 6.2 the kernel walks every virtual and real server's estimator every 2s under a lock that adding or removing a real server waits for: off at tens of thousands of Services (see README)")
	fs.BoolVar(&o.StrictARP, "strict-arp", false, "set arp_ignore=1 and arp_announce=2 so the node never answers ARP for Service VIPs (needed by MetalLB)")
	fs.StringSliceVar(&o.ClusterCIDRs, FlagClusterCIDR, nil, "the pod networks, comma-separated (any families): traffic to a ClusterIP from outside them is masqueraded")
	fs.StringSliceVar(&o.ExcludeCIDRs, FlagExcludeCIDRs, nil, "CIDRs whose virtual servers the proxy never deletes when it cleans up, comma-separated (kube-proxy's ipvs.excludeCIDRs)")
	fs.StringSliceVar(&o.ServiceCIDRs, FlagServiceCIDR, nil, "the cluster's Service CIDRs, comma-separated (any families), used when the API server has no ServiceCIDR objects and with --manifests: new connections to an address there that no Service holds are refused")
	fs.BoolVar(&o.MasqueradeAll, FlagMasqueradeAll, false, "masquerade every connection to a ClusterIP")
	fs.StringVar(&o.DetectLocalMode, "detect-local-mode", LocalModeClusterCIDR, "how traffic from this node's pods is told from other traffic (ClusterIP traffic from elsewhere is masqueraded), as kube-proxy's: ClusterCIDR (from --cluster-cidr), NodeCIDR (from the Node object's spec.podCIDRs, waited for at start; a change stops the proxy to be restarted), BridgeInterface (arriving on --pod-bridge-interface) or InterfaceNamePrefix (arriving on an interface named --pod-interface-name-prefix*)")
	fs.StringVar(&o.PodBridgeInterface, "pod-bridge-interface", "", "with --detect-local-mode=BridgeInterface: the bridge this node's pods are attached to")
	fs.StringVar(&o.PodInterfaceNamePrefix, "pod-interface-name-prefix", "", "with --detect-local-mode=InterfaceNamePrefix: the start of the names of this node's pods' interfaces (e.g. veth)")
	fs.IntVar(&o.MasqueradeBit, "iptables-masquerade-bit", 14, "the packet-mark bit that asks for masquerade, as kube-proxy's: 14 or 15 (the other bits make up the in-cluster marks)")
	fs.StringVar(&o.BindAddress, "bind-address", "0.0.0.0", "the node's primary IP of its family for --nodeport-addresses=primary, instead of the Node object's InternalIP, as kube-proxy's (0.0.0.0 or ::: the Node object's; nothing binds to it)")
	fs.BoolVar(&o.BindAddressHardFail, "bind-address-hard-fail", false, "exit when the health or metrics server cannot listen, instead of logging it and going on")
	fs.Float32Var(&o.KubeAPIQPS, "kube-api-qps", 0, "API requests per second (0: client-go's default, 5)")
	fs.IntVar(&o.KubeAPIBurst, "kube-api-burst", 0, "API request burst (0: client-go's default, 10)")
	fs.StringVar(&o.KubeAPIContentType, "kube-api-content-type", "", "content type of API requests, e.g. application/vnd.kubernetes.protobuf (default: client-go's, JSON)")
	fs.StringVar(&o.KubeAPIAcceptContentTypes, "kube-api-accept-content-types", "", "the Accept header of API requests (default: client-go's)")
	fs.DurationVar(&o.ConfigSyncPeriod, "config-sync-period", 0, "how often the informers re-deliver every cached Service, EndpointSlice and the Node, as kube-proxy's configSyncPeriod (0: never; the periodic repair compares the kernel anyway)")
	fs.StringVar(&o.IPTablesBackend, "iptables-backend", "", "iptables backend for the project's rules: legacy or nft (default: detect the one the node uses)")
	fs.StringVar(&o.Mode, "mode", ModeAuto, "proxy mode: auto (IPVS when the preflight passes, else the iptables proxier, loudly), ipvs (refuse to run without IPVS) or iptables")
	fs.StringVar(&o.HealthzAddress, "healthz-bind-address", healthcheck.DefaultProxyHealthAddress, "address of the /healthz and /livez server (empty: none)")
	fs.StringVar(&o.MetricsAddress, "metrics-bind-address", metrics.DefaultAddress, "address of the Prometheus /metrics server (empty: none)")
	fs.StringVar(&o.StateSocket, "state-socket", introspect.DefaultSocket, "unix socket that serves the desired state to `kube-ipvs list` and `explain` on this node (never a TCP port; empty: none)")
	fs.StringVar(&o.HandoverFile, "handover-file", "", "IPVS mode: file a clean stop writes the applied virtual servers to, and the next start on the same boot takes (and removes), so that its first sync reads back only the virtual servers that changed instead of all of them; the first repair cycle still checks everything (empty: none; deploy/ sets /run/kube-ipvs/ipvs-handover)")
	fs.BoolVar(&o.CleanupKubeProxy, FlagCleanupKubeProxy, false, "once the first full sync has written the proxy's own rules, remove what kube-proxy left on the node, as `kube-ipvs cleanup --kube-proxy` (its KUBE-* chains, the rules that jump to them, its KUBE-* ipsets; never kube-ipvs' objects, virtual servers or kube-ipvs0), retrying with backoff until it succeeds; readiness does not wait for it")
	fs.IntVar(&o.Conntrack.MaxPerCore, "conntrack-max-per-core", DefaultConntrackMaxPerCore, "conntrack table entries per CPU: net.netfilter.nf_conntrack_max is raised (never lowered) to this times the node's CPUs, at most 1048576 and at least --conntrack-min, and the conntrack hash size to a quarter of that (0: leave both as they are)")
	fs.IntVar(&o.Conntrack.Min, "conntrack-min", DefaultConntrackMin, "the least net.netfilter.nf_conntrack_max the proxy raises the table to, whatever --conntrack-max-per-core gives")
	fs.DurationVar(&o.Conntrack.TCPEstablishedTimeout, "conntrack-tcp-timeout-established", 24*time.Hour, "net.netfilter.nf_conntrack_tcp_timeout_established: how long an idle established TCP connection stays tracked (0: leave the kernel's)")
	fs.DurationVar(&o.Conntrack.TCPCloseWaitTimeout, "conntrack-tcp-timeout-close-wait", time.Hour, "net.netfilter.nf_conntrack_tcp_timeout_close_wait (0: leave the kernel's)")
	fs.BoolVar(&o.Conntrack.TCPBeLiberal, "conntrack-tcp-be-liberal", false, "set net.netfilter.nf_conntrack_tcp_be_liberal=1: out-of-window TCP packets are not marked invalid (asymmetric paths through middleboxes)")
	fs.DurationVar(&o.Conntrack.UDPTimeout, "conntrack-udp-timeout", 0, "net.netfilter.nf_conntrack_udp_timeout: how long a UDP flow without replies stays tracked (0: leave the kernel's)")
	fs.DurationVar(&o.Conntrack.UDPStreamTimeout, "conntrack-udp-timeout-stream", 0, "net.netfilter.nf_conntrack_udp_timeout_stream: how long a UDP flow with replies stays tracked (0: leave the kernel's)")
	fs.IntVar(&o.OOMScoreAdj, "oom-score-adj", DefaultOOMScoreAdj, "written to /proc/self/oom_score_adj at start, -1000..1000: under memory pressure the kernel kills almost anything before the node's service proxy (below the value the container runtime gave the process it needs CAP_SYS_RESOURCE)")
	fs.BoolVar(&o.InitOnly, "init-only", false, "load the kernel modules and set the sysctls and conntrack limits the proxy needs (what needs a writable /proc/sys and /sys, so a privileged container), then exit 0; the proxy itself can then run with NET_ADMIN and NET_RAW")
	fs.BoolVar(&o.Once, "once", false, "sync once, then exit 0 on success or 1 on failure")
	fs.StringVar(&o.LogLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.StringVar(&o.LoggingFormat, "logging-format", LogFormatText, "log format: text (key=value lines) or json (kube-proxy's JSON lines: ts, caller, msg, v, err)")
	fs.IntVarP(&o.Verbosity, "v", "v", 0, "kube-proxy's log verbosity: 4 or more logs debug messages too, as --log-level=debug does")
}

// ReadConfigFile fills o from the file --config names, if any: every setting the file gives
// goes to its flag on fs (the one AddFlags bound to o) unless the command line set that flag,
// so the command line wins. Call it after fs.Parse. It returns the file's warnings, meant for
// the log once the logger exists (--log-level may come from the file).
func (o *Options) ReadConfigFile(fs *pflag.FlagSet) ([]string, error) {
	if o.ConfigFile == "" {
		return nil, nil
	}
	settings, warnings, err := Load(o.ConfigFile)
	if err != nil {
		return nil, err
	}
	if err := ApplyToFlags(settings, fs); err != nil {
		return nil, err
	}
	return warnings, nil
}

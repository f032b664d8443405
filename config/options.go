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

// Options are the settings of `kube-ipvs run`. Each field has one row in optionTable, which
// names its flag, default and KubeIPVSConfiguration field: AddFlags binds every field to its
// flag, and ReadConfigFile fills the ones the command line left unset from the --config file,
// through the same flags; Validate then checks the result once, whichever source a value came
// from.
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

// AddFlags defines the run flags on fs, bound to o, with their defaults and help texts, in the
// order of optionTable.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	for _, opt := range optionTable {
		opt.bind.define(o, fs, opt.flag, opt.shorthand, opt.usage)
	}
}

// An option is one setting of `kube-ipvs run`: its flag, the field of Options the flag is
// bound to with its default, and the KubeIPVSConfiguration field that sets it from a file.
type option struct {
	flag      string
	shorthand string // the one-letter form of the flag, if any
	usage     string
	bind      binding
	// field is the flag's KubeIPVSConfiguration field, camelCase, and parse reads it. A flag
	// without a field is one no file sets: --config itself, --once and --init-only (ways of
	// running rather than settings), --mode and --iptables-backend.
	field string
	parse parser
}

// A binding is a flag's variable, a field of Options, and the flag's default.
type binding struct {
	target func(o *Options) any // the field: a pointer into o
	define func(o *Options, fs *pflag.FlagSet, name, shorthand, usage string)
}

// bind makes the binding of a flag to the field of Options that field returns, with default
// def; the field's type picks the kind of flag.
func bind[T string | bool | int | float32 | time.Duration | []string](field func(o *Options) *T, def T) binding {
	return binding{
		target: func(o *Options) any { return field(o) },
		define: func(o *Options, fs *pflag.FlagSet, name, shorthand, usage string) {
			switch p := any(field(o)).(type) {
			case *string:
				fs.StringVarP(p, name, shorthand, any(def).(string), usage)
			case *bool:
				fs.BoolVarP(p, name, shorthand, any(def).(bool), usage)
			case *int:
				fs.IntVarP(p, name, shorthand, any(def).(int), usage)
			case *float32:
				fs.Float32VarP(p, name, shorthand, any(def).(float32), usage)
			case *time.Duration:
				fs.DurationVarP(p, name, shorthand, any(def).(time.Duration), usage)
			case *[]string:
				fs.StringSliceVarP(p, name, shorthand, any(def).([]string), usage)
			}
		},
	}
}

// optionTable is every setting of `kube-ipvs run` (but --lock-file, which cmd/kube-ipvs adds)
// and the one place a setting is added: AddFlags defines the flags from it in this order (that
// of --help), and a KubeIPVSConfiguration is read through it. Tests check it against Options
// (every field bound by exactly one flag) and deploy/configmap.yaml (every file field shown,
// with the flag's default).
var optionTable = []option{
	{flag: "config",
		bind:  bind(func(o *Options) *string { return &o.ConfigFile }, ""),
		usage: "a KubeIPVSConfiguration or kube-proxy KubeProxyConfiguration file; flags given on the command line override it"},
	{flag: "kubeconfig", field: "kubeconfig", parse: parseString,
		bind:  bind(func(o *Options) *string { return &o.Kubeconfig }, ""),
		usage: "path to a kubeconfig file (default: none, which means the in-cluster configuration)"},
	{flag: "manifests", field: "manifests", parse: parseString,
		bind:  bind(func(o *Options) *string { return &o.Manifests }, ""),
		usage: "run without a cluster: read Service, EndpointSlice, ServiceCIDR and Node objects from this YAML/JSON file or folder, re-read on SIGHUP (default: none, watch the API server)"},
	{flag: "hostname-override", field: "hostnameOverride", parse: parseHostname,
		bind:  bind(func(o *Options) *string { return &o.HostnameOverride }, ""),
		usage: "this node's name, as in its Node object and endpoints' nodeName (default: the host name)"},
	{flag: "scheduler", field: "scheduler", parse: parseScheduler,
		bind:  bind(func(o *Options) *string { return &o.Scheduler }, "rr"),
		usage: "default IPVS scheduler for Services without the " + proxy.AnnotationScheduler + " annotation: " + strings.Join(proxy.Schedulers(), ", ")},
	{flag: "sync-period", field: "syncPeriod", parse: parsePositiveDuration,
		bind:  bind(func(o *Options) *time.Duration { return &o.SyncPeriod }, 30*time.Second),
		usage: "how often the kernel state is compared with the desired state and repaired"},
	{flag: "min-sync-period", field: "minSyncPeriod", parse: parseDuration,
		bind:  bind(func(o *Options) *time.Duration { return &o.MinSyncPeriod }, time.Second),
		usage: "shortest time between two syncs; changes arriving faster are applied together"},
	{flag: "repair-step", field: "repairStep", parse: parseCount,
		bind:  bind(func(o *Options) *int { return &o.RepairStep }, DefaultRepairStep),
		usage: "how many Services, then virtual servers, one step of the periodic repair checks before waiting changes are applied (0: repair in one go, changes wait for it)"},
	{flag: "nodeport-addresses", field: "nodePortAddresses", parse: parseNodePortAddresses,
		bind:  bind(func(o *Options) *[]string { return &o.NodePortAddresses }, nil),
		usage: "CIDRs whose node addresses get NodePort virtual servers, comma-separated, or \"primary\" for the Node object's InternalIPs (default: every address except loopback, link-local and the dummy interface's)"},
	{flag: "service-node-port-range", field: "serviceNodePortRange", parse: parsePortRange,
		bind:  bind(func(o *Options) *string { return &o.NodePortRange }, DefaultNodePortRange),
		usage: "the cluster's NodePort range; NodePort virtual servers on node IPs inside it are the proxy's own"},
	{flag: "dummy-interface", field: "dummyInterface", parse: parseInterfaceName,
		bind:  bind(func(o *Options) *string { return &o.DummyInterface }, DefaultDummyInterface),
		usage: "the dummy interface that holds the Service addresses"},
	{flag: "vip-binding", field: "vipBinding", parse: parseVIPBinding,
		bind:  bind(func(o *Options) *string { return &o.VIPBinding }, string(dummyif.BindAddress)),
		usage: "how Service VIPs are made local: address (addresses of the dummy interface, as kube-proxy; `ip addr show kube-ipvs0`) or route (local routes through it, `ip route show table local dev kube-ipvs0`: binds tens of thousands of VIPs many times faster)"},
	{flag: "graceful-termination-timeout", field: "gracefulTerminationTimeout", parse: parseDuration,
		bind:  bind(func(o *Options) *time.Duration { return &o.DrainTimeout }, 30*time.Second),
		usage: "how long a removed TCP endpoint keeps its open connections at weight 0 before it is deleted (0: delete at once)"},
	{flag: "ipvs-tcp-timeout", field: "ipvsTCPTimeout", parse: parseDuration,
		bind:  bind(func(o *Options) *time.Duration { return &o.TCPTimeout }, 0),
		usage: "IPVS timeout of idle established TCP connections, as ipvsadm --set (0: leave the kernel's)"},
	{flag: "ipvs-tcpfin-timeout", field: "ipvsTCPFinTimeout", parse: parseDuration,
		bind:  bind(func(o *Options) *time.Duration { return &o.TCPFinTimeout }, 0),
		usage: "IPVS timeout of TCP connections after a FIN, as ipvsadm --set (0: leave the kernel's)"},
	{flag: "ipvs-udp-timeout", field: "ipvsUDPTimeout", parse: parseDuration,
		bind:  bind(func(o *Options) *time.Duration { return &o.UDPTimeout }, 0),
		usage: "IPVS timeout of UDP flows, as ipvsadm --set (0: leave the kernel's)"},
	{flag: "ipvs-rate-estimation", field: "ipvsRateEstimation", parse: parseRateEstimation,
		bind:  bind(func(o *Options) *string { return &o.RateEstimation }, string(sysctl.RateEstimationKernel)),
		usage: "net.ipv4.vs.run_estimation: kernel (leave it as it is, as kube-proxy does), on, or off (the rates of ipvsadm --rate stop, and so do the --stats counters, which the same rounds sum). Before Linux 6.2 the kernel walks every virtual and real server's estimator every 2s under a lock that adding or removing a real server waits for: off at tens of thousands of Services (see README)"},
	{flag: "strict-arp", field: "strictARP", parse: parseBool,
		bind:  bind(func(o *Options) *bool { return &o.StrictARP }, false),
		usage: "set arp_ignore=1 and arp_announce=2 so the node never answers ARP for Service VIPs (needed by MetalLB)"},
	{flag: FlagClusterCIDR, field: "clusterCIDR", parse: parseClusterCIDR,
		bind:  bind(func(o *Options) *[]string { return &o.ClusterCIDRs }, nil),
		usage: "the pod networks, comma-separated (any families): traffic to a ClusterIP from outside them is masqueraded"},
	{flag: FlagExcludeCIDRs, field: "excludeCIDRs", parse: parseCIDRList,
		bind:  bind(func(o *Options) *[]string { return &o.ExcludeCIDRs }, nil),
		usage: "CIDRs whose virtual servers the proxy never deletes when it cleans up, comma-separated (kube-proxy's ipvs.excludeCIDRs)"},
	{flag: FlagServiceCIDR, field: "serviceCIDRs", parse: parseServiceCIDRs,
		bind:  bind(func(o *Options) *[]string { return &o.ServiceCIDRs }, nil),
		usage: "the cluster's Service CIDRs, comma-separated (any families), used when the API server has no ServiceCIDR objects and with --manifests: new connections to an address there that no Service holds are refused"},
	{flag: FlagMasqueradeAll, field: "masqueradeAll", parse: parseBool,
		bind:  bind(func(o *Options) *bool { return &o.MasqueradeAll }, false),
		usage: "masquerade every connection to a ClusterIP"},
	{flag: "detect-local-mode", field: "detectLocalMode", parse: parseDetectLocalMode,
		bind:  bind(func(o *Options) *string { return &o.DetectLocalMode }, LocalModeClusterCIDR),
		usage: "how traffic from this node's pods is told from other traffic (ClusterIP traffic from elsewhere is masqueraded), as kube-proxy's: ClusterCIDR (from --cluster-cidr), NodeCIDR (from the Node object's spec.podCIDRs, waited for at start; a change stops the proxy to be restarted), BridgeInterface (arriving on --pod-bridge-interface) or InterfaceNamePrefix (arriving on an interface named --pod-interface-name-prefix*)"},
	{flag: "pod-bridge-interface", field: "podBridgeInterface", parse: orEmpty(parseInterfaceName),
		bind:  bind(func(o *Options) *string { return &o.PodBridgeInterface }, ""),
		usage: "with --detect-local-mode=BridgeInterface: the bridge this node's pods are attached to"},
	{flag: "pod-interface-name-prefix", field: "podInterfaceNamePrefix", parse: orEmpty(parseInterfacePrefix),
		bind:  bind(func(o *Options) *string { return &o.PodInterfaceNamePrefix }, ""),
		usage: "with --detect-local-mode=InterfaceNamePrefix: the start of the names of this node's pods' interfaces (e.g. veth)"},
	{flag: "iptables-masquerade-bit", field: "masqueradeBit", parse: parseMasqueradeBit,
		bind:  bind(func(o *Options) *int { return &o.MasqueradeBit }, 14),
		usage: "the packet-mark bit that asks for masquerade, as kube-proxy's: 14 or 15 (the other bits make up the in-cluster marks)"},
	{flag: "bind-address", field: "bindAddress", parse: parseBindAddress,
		bind:  bind(func(o *Options) *string { return &o.BindAddress }, "0.0.0.0"),
		usage: "the node's primary IP of its family for --nodeport-addresses=primary, instead of the Node object's InternalIP, as kube-proxy's (0.0.0.0 or ::: the Node object's; nothing binds to it)"},
	{flag: "bind-address-hard-fail", field: "bindAddressHardFail", parse: parseBool,
		bind:  bind(func(o *Options) *bool { return &o.BindAddressHardFail }, false),
		usage: "exit when the health or metrics server cannot listen, instead of logging it and going on"},
	{flag: "kube-api-qps", field: "kubeAPIQPS", parse: parseQPS,
		bind:  bind(func(o *Options) *float32 { return &o.KubeAPIQPS }, 0),
		usage: "API requests per second (0: client-go's default, 5)"},
	{flag: "kube-api-burst", field: "kubeAPIBurst", parse: parseCount,
		bind:  bind(func(o *Options) *int { return &o.KubeAPIBurst }, 0),
		usage: "API request burst (0: client-go's default, 10)"},
	{flag: "kube-api-content-type", field: "kubeAPIContentType", parse: parseString,
		bind:  bind(func(o *Options) *string { return &o.KubeAPIContentType }, ""),
		usage: "content type of API requests, e.g. application/vnd.kubernetes.protobuf (default: client-go's, JSON)"},
	{flag: "kube-api-accept-content-types", field: "kubeAPIAcceptContentTypes", parse: parseString,
		bind:  bind(func(o *Options) *string { return &o.KubeAPIAcceptContentTypes }, ""),
		usage: "the Accept header of API requests (default: client-go's)"},
	{flag: "config-sync-period", field: "configSyncPeriod", parse: parseDuration,
		bind:  bind(func(o *Options) *time.Duration { return &o.ConfigSyncPeriod }, 0),
		usage: "how often the informers re-deliver every cached Service, EndpointSlice and the Node, as kube-proxy's configSyncPeriod (0: never; the periodic repair compares the kernel anyway)"},
	{flag: "iptables-backend",
		bind:  bind(func(o *Options) *string { return &o.IPTablesBackend }, ""),
		usage: "iptables backend for the project's rules: legacy or nft (default: detect the one the node uses)"},
	{flag: "mode",
		bind:  bind(func(o *Options) *string { return &o.Mode }, ModeAuto),
		usage: "proxy mode: auto (IPVS when the preflight passes, else the iptables proxier, loudly), ipvs (refuse to run without IPVS) or iptables"},
	{flag: "healthz-bind-address", field: "healthzBindAddress", parse: bindAddress(defaultPort(healthcheck.DefaultProxyHealthAddress)),
		bind:  bind(func(o *Options) *string { return &o.HealthzAddress }, healthcheck.DefaultProxyHealthAddress),
		usage: "address of the /healthz and /livez server (empty: none)"},
	{flag: "metrics-bind-address", field: "metricsBindAddress", parse: bindAddress(defaultPort(metrics.DefaultAddress)),
		bind:  bind(func(o *Options) *string { return &o.MetricsAddress }, metrics.DefaultAddress),
		usage: "address of the Prometheus /metrics server (empty: none)"},
	{flag: "state-socket", field: "stateSocket", parse: parseString,
		bind:  bind(func(o *Options) *string { return &o.StateSocket }, introspect.DefaultSocket),
		usage: "unix socket that serves the desired state to `kube-ipvs list` and `explain` on this node (never a TCP port; empty: none)"},
	{flag: "handover-file", field: "handoverFile", parse: parseString,
		bind:  bind(func(o *Options) *string { return &o.HandoverFile }, ""),
		usage: "IPVS mode: file a clean stop writes the applied virtual servers to, and the next start on the same boot takes (and removes), so that its first sync reads back only the virtual servers that changed instead of all of them; the first repair cycle still checks everything (empty: none; deploy/ sets /run/kube-ipvs/ipvs-handover)"},
	{flag: FlagCleanupKubeProxy, field: "cleanupKubeProxy", parse: parseBool,
		bind:  bind(func(o *Options) *bool { return &o.CleanupKubeProxy }, false),
		usage: "once the first full sync has written the proxy's own rules, remove what kube-proxy left on the node, as `kube-ipvs cleanup --kube-proxy` (its KUBE-* chains, the rules that jump to them, its KUBE-* ipsets; never kube-ipvs' objects, virtual servers or kube-ipvs0), retrying with backoff until it succeeds; readiness does not wait for it"},
	{flag: "conntrack-max-per-core", field: "conntrackMaxPerCore", parse: parseInt32Count,
		bind:  bind(func(o *Options) *int { return &o.Conntrack.MaxPerCore }, DefaultConntrackMaxPerCore),
		usage: "conntrack table entries per CPU: net.netfilter.nf_conntrack_max is raised (never lowered) to this times the node's CPUs, at most 1048576 and at least --conntrack-min, and the conntrack hash size to a quarter of that (0: leave both as they are)"},
	{flag: "conntrack-min", field: "conntrackMin", parse: parseInt32Count,
		bind:  bind(func(o *Options) *int { return &o.Conntrack.Min }, DefaultConntrackMin),
		usage: "the least net.netfilter.nf_conntrack_max the proxy raises the table to, whatever --conntrack-max-per-core gives"},
	{flag: "conntrack-tcp-timeout-established", field: "conntrackTCPEstablishedTimeout", parse: parseDuration,
		bind:  bind(func(o *Options) *time.Duration { return &o.Conntrack.TCPEstablishedTimeout }, 24*time.Hour),
		usage: "net.netfilter.nf_conntrack_tcp_timeout_established: how long an idle established TCP connection stays tracked (0: leave the kernel's)"},
	{flag: "conntrack-tcp-timeout-close-wait", field: "conntrackTCPCloseWaitTimeout", parse: parseDuration,
		bind:  bind(func(o *Options) *time.Duration { return &o.Conntrack.TCPCloseWaitTimeout }, time.Hour),
		usage: "net.netfilter.nf_conntrack_tcp_timeout_close_wait (0: leave the kernel's)"},
	{flag: "conntrack-tcp-be-liberal", field: "conntrackTCPBeLiberal", parse: parseBool,
		bind:  bind(func(o *Options) *bool { return &o.Conntrack.TCPBeLiberal }, false),
		usage: "set net.netfilter.nf_conntrack_tcp_be_liberal=1: out-of-window TCP packets are not marked invalid (asymmetric paths through middleboxes)"},
	{flag: "conntrack-udp-timeout", field: "conntrackUDPTimeout", parse: parseDuration,
		bind:  bind(func(o *Options) *time.Duration { return &o.Conntrack.UDPTimeout }, 0),
		usage: "net.netfilter.nf_conntrack_udp_timeout: how long a UDP flow without replies stays tracked (0: leave the kernel's)"},
	{flag: "conntrack-udp-timeout-stream", field: "conntrackUDPStreamTimeout", parse: parseDuration,
		bind:  bind(func(o *Options) *time.Duration { return &o.Conntrack.UDPStreamTimeout }, 0),
		usage: "net.netfilter.nf_conntrack_udp_timeout_stream: how long a UDP flow with replies stays tracked (0: leave the kernel's)"},
	{flag: "oom-score-adj", field: "oomScoreAdj", parse: parseOOMScoreAdj,
		bind:  bind(func(o *Options) *int { return &o.OOMScoreAdj }, DefaultOOMScoreAdj),
		usage: "written to /proc/self/oom_score_adj at start, -1000..1000: under memory pressure the kernel kills almost anything before the node's service proxy (below the value the container runtime gave the process it needs CAP_SYS_RESOURCE)"},
	{flag: "init-only",
		bind:  bind(func(o *Options) *bool { return &o.InitOnly }, false),
		usage: "load the kernel modules and set the sysctls and conntrack limits the proxy needs (what needs a writable /proc/sys and /sys, so a privileged container), then exit 0; the proxy itself can then run with NET_ADMIN and NET_RAW"},
	{flag: "once",
		bind:  bind(func(o *Options) *bool { return &o.Once }, false),
		usage: "sync once, then exit 0 on success or 1 on failure"},
	{flag: "log-level", field: "logLevel", parse: parseLogLevel,
		bind:  bind(func(o *Options) *string { return &o.LogLevel }, "info"),
		usage: "log level: debug, info, warn or error"},
	{flag: "logging-format", field: "loggingFormat", parse: parseLogFormat,
		bind:  bind(func(o *Options) *string { return &o.LoggingFormat }, LogFormatText),
		usage: "log format: text (key=value lines) or json (kube-proxy's JSON lines: ts, caller, msg, v, err)"},
	{flag: "v", shorthand: "v", field: "verbosity", parse: parseInt32Count,
		bind:  bind(func(o *Options) *int { return &o.Verbosity }, 0),
		usage: "kube-proxy's log verbosity: 4 or more logs debug messages too, as --log-level=debug does"},
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

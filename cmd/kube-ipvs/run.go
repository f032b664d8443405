package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"

	"github.com/kube-ipvs/kube-ipvs/config"
	"github.com/kube-ipvs/kube-ipvs/controller"
	"github.com/kube-ipvs/kube-ipvs/dataplane/ipvsmode"
	"github.com/kube-ipvs/kube-ipvs/healthcheck"
	"github.com/kube-ipvs/kube-ipvs/ipvs"
	"github.com/kube-ipvs/kube-ipvs/manifests"
	"github.com/kube-ipvs/kube-ipvs/metrics"
	"github.com/kube-ipvs/kube-ipvs/nodeaddr"
	"github.com/kube-ipvs/kube-ipvs/proxy"
	"github.com/kube-ipvs/kube-ipvs/sysctl"
)

// runOptions are the flags of `kube-ipvs run`.
type runOptions struct {
	kubeconfig        string
	manifests         string
	hostname          string
	scheduler         string
	syncPeriod        time.Duration
	minSyncPeriod     time.Duration
	nodePortAddresses []string
	nodePortRange     string
	dummyInterface    string
	once              bool
	logLevel          string
	drainTimeout      time.Duration
	tcpTimeout        time.Duration
	tcpFinTimeout     time.Duration
	udpTimeout        time.Duration
	strictARP         bool
	ipvsMode          ipvsmode.Config // derived from the flags by controllerConfig
	healthzAddress    string
	metricsAddress    string
	clusterCIDRs      []string
	excludeCIDRs      []string
	configFile        string
	masqueradeAll     bool
	iptablesBackend   string
	mode              string
	lockFile          string
}

func runFlags(o *runOptions) *pflag.FlagSet {
	fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
	fs.SortFlags = false
	fs.StringVar(&o.configFile, "config", "", "a KubeIPVSConfiguration or kube-proxy KubeProxyConfiguration file; flags given on the command line override it")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "path to a kubeconfig file (default: none, which means the in-cluster configuration)")
	fs.StringVar(&o.manifests, "manifests", "", "run without a cluster: read Service, EndpointSlice and Node objects from this YAML/JSON file or folder, re-read on SIGHUP (default: none, watch the API server)")
	fs.StringVar(&o.hostname, "hostname-override", "", "this node's name, as in its Node object and endpoints' nodeName (default: the host name)")
	fs.StringVar(&o.scheduler, "scheduler", "rr", "default IPVS scheduler for Services without the "+proxy.AnnotationScheduler+" annotation: "+strings.Join(proxy.Schedulers(), ", "))
	fs.DurationVar(&o.syncPeriod, "sync-period", 30*time.Second, "how often the kernel state is compared with the desired state and repaired")
	fs.DurationVar(&o.minSyncPeriod, "min-sync-period", time.Second, "shortest time between two syncs; changes arriving faster are applied together")
	fs.StringSliceVar(&o.nodePortAddresses, "nodeport-addresses", nil, "CIDRs whose node addresses get NodePort virtual servers, comma-separated, or \"primary\" for the Node object's InternalIPs (default: every address except loopback, link-local and the dummy interface's)")
	fs.StringVar(&o.nodePortRange, "service-node-port-range", defaultNodePortRange, "the cluster's NodePort range; NodePort virtual servers on node IPs inside it are the proxy's own")
	fs.StringVar(&o.dummyInterface, "dummy-interface", defaultDummyInterface, "the dummy interface that holds the Service addresses")
	fs.DurationVar(&o.drainTimeout, "graceful-termination-timeout", 30*time.Second, "how long a removed TCP endpoint keeps its open connections at weight 0 before it is deleted (0: delete at once)")
	fs.DurationVar(&o.tcpTimeout, "ipvs-tcp-timeout", 0, "IPVS timeout of idle established TCP connections, as ipvsadm --set (0: leave the kernel's)")
	fs.DurationVar(&o.tcpFinTimeout, "ipvs-tcpfin-timeout", 0, "IPVS timeout of TCP connections after a FIN, as ipvsadm --set (0: leave the kernel's)")
	fs.DurationVar(&o.udpTimeout, "ipvs-udp-timeout", 0, "IPVS timeout of UDP flows, as ipvsadm --set (0: leave the kernel's)")
	fs.BoolVar(&o.strictARP, "strict-arp", false, "set arp_ignore=1 and arp_announce=2 so the node never answers ARP for Service VIPs (needed by MetalLB)")
	fs.StringSliceVar(&o.clusterCIDRs, "cluster-cidr", nil, "the pod networks, comma-separated (any families): traffic to a ClusterIP from outside them is masqueraded")
	fs.StringSliceVar(&o.excludeCIDRs, "exclude-cidrs", nil, "CIDRs whose virtual servers the proxy never deletes when it cleans up, comma-separated (kube-proxy's ipvs.excludeCIDRs)")
	fs.BoolVar(&o.masqueradeAll, "masquerade-all", false, "masquerade every connection to a ClusterIP")
	fs.StringVar(&o.iptablesBackend, "iptables-backend", "", "iptables backend for the project's rules: legacy or nft (default: detect the one the node uses)")
	fs.StringVar(&o.mode, "mode", modeAuto, "proxy mode: auto (IPVS when the preflight passes, else the iptables proxier, loudly), ipvs (refuse to run without IPVS) or iptables")
	fs.StringVar(&o.healthzAddress, "healthz-bind-address", healthcheck.DefaultProxyHealthAddress, "address of the /healthz and /livez server (empty: none)")
	fs.StringVar(&o.metricsAddress, "metrics-bind-address", metrics.DefaultAddress, "address of the Prometheus /metrics server (empty: none)")
	fs.BoolVar(&o.once, "once", false, "sync once, then exit 0 on success or 1 on failure")
	fs.StringVar(&o.lockFile, "lock-file", defaultLockFile, "file the proxy holds a shared flock on while it runs, so that `kube-ipvs cleanup` refuses to run meanwhile (empty: none)")
	fs.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	documentZeroDefaults(fs)
	return fs
}

// documentZeroDefaults makes --help state every flag's default: pflag omits defaults that
// are the zero value (false, empty), and an operator should not have to guess them.
func documentZeroDefaults(fs *pflag.FlagSet) {
	fs.VisitAll(func(f *pflag.Flag) {
		switch f.DefValue {
		case "false", "0", "0s":
			f.Usage += " (default " + f.DefValue + ")"
		case "", "[]":
			if !strings.Contains(f.Usage, "(default") {
				f.Usage += " (default: none)"
			}
		}
	})
}

func runRun(args []string, stdout, stderr io.Writer) int {
	var o runOptions
	fs := runFlags(&o)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stdout, "Usage: kube-ipvs run [flags]\n\nRuns the service proxy: watches Services, EndpointSlices and this Node and programs IPVS.\n\nFlags:\n%s", fs.FlagUsages())
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "kube-ipvs run: unexpected arguments %q\n", fs.Args())
		return 2
	}
	var warnings []string
	if o.configFile != "" {
		settings, w, err := config.Load(o.configFile)
		if err != nil {
			fmt.Fprintf(stderr, "kube-ipvs run: --config %s: %v\n", o.configFile, err)
			return 2
		}
		warnings = w
		if err := config.ApplyToFlags(settings, fs); err != nil {
			fmt.Fprintf(stderr, "kube-ipvs run: --config %s: %v\n", o.configFile, err)
			return 2
		}
	}
	log, err := newLogger(stderr, o.logLevel)
	if err != nil {
		fmt.Fprintf(stderr, "kube-ipvs run: %v\n", err)
		return 2
	}
	for _, w := range warnings {
		log.Warn("config file", "file", o.configFile, "warning", w)
	}
	cfg, err := o.controllerConfig()
	if err != nil {
		fmt.Fprintf(stderr, "kube-ipvs run: %v\n", err)
		return 2
	}
	if err := serve(o, cfg, stderr, log); err != nil {
		log.Error("kube-ipvs stopped", "err", err)
		return 1
	}
	return 0
}

func newLogger(w io.Writer, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level: %v", err)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l})), nil
}

func (o *runOptions) controllerConfig() (controller.Config, error) {
	cfg := controller.Config{
		NodeName:         o.hostname,
		DefaultScheduler: o.scheduler,
		SyncPeriod:       o.syncPeriod,
		MinSyncPeriod:    o.minSyncPeriod,
	}
	if cfg.NodeName == "" {
		h, err := os.Hostname()
		if err != nil {
			return cfg, fmt.Errorf("--hostname-override is empty and the host name is unknown: %v", err)
		}
		cfg.NodeName = strings.ToLower(h)
	}
	if !slices.Contains(proxy.Schedulers(), o.scheduler) {
		return cfg, fmt.Errorf("--scheduler=%q: not an IPVS scheduler; use one of %s", o.scheduler, strings.Join(proxy.Schedulers(), ", "))
	}
	if o.syncPeriod <= 0 {
		return cfg, fmt.Errorf("--sync-period=%s: must be positive", o.syncPeriod)
	}
	if o.minSyncPeriod < 0 || o.minSyncPeriod > o.syncPeriod {
		return cfg, fmt.Errorf("--min-sync-period=%s: must be between 0 and --sync-period", o.minSyncPeriod)
	}
	npa, primary, err := parseNodePortAddresses(o.nodePortAddresses)
	if err != nil {
		return cfg, err
	}
	cfg.NodePortAddresses, cfg.NodePortPrimary = npa, primary
	if o.ipvsMode.ExcludeCIDRs, err = parseCIDRs("exclude-cidrs", o.excludeCIDRs); err != nil {
		return cfg, err
	}
	if o.ipvsMode.Firewall.ClusterCIDRs, err = parseCIDRs("cluster-cidr", o.clusterCIDRs); err != nil {
		return cfg, err
	}
	o.ipvsMode.Firewall.MasqueradeAll = o.masqueradeAll
	// IPv4 always; IPv6 where the kernel has it, or ip6tables and IPv6 sets would fail on
	// every sync of an IPv4-only node.
	o.ipvsMode.Firewall.IPv4 = true
	_, err = os.Stat("/proc/sys/net/ipv6/conf/all")
	o.ipvsMode.Firewall.IPv6 = err == nil
	switch o.mode {
	case modeAuto, modeIPVS, modeIPTables:
	default:
		return cfg, fmt.Errorf("--mode=%q: use auto, ipvs or iptables", o.mode)
	}
	switch o.iptablesBackend {
	case "", "legacy", "nft":
	default:
		return cfg, fmt.Errorf("--iptables-backend=%q: use legacy or nft, or leave it empty to detect", o.iptablesBackend)
	}
	if o.ipvsMode.NodePortMin, o.ipvsMode.NodePortMax, err = parseNodePortRange(o.nodePortRange); err != nil {
		return cfg, err
	}
	return cfg, nil
}

// serve builds the source, the reconcilers and the controller, and runs until a signal.
func serve(o runOptions, cfg controller.Config, stderr io.Writer, log *slog.Logger) error {
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer cancel()
	unlock, err := holdRunLock(ctx, o.lockFile, log)
	if err != nil {
		return err
	}
	defer unlock()

	mode, blocking, err := chooseMode(ctx, o, stderr, log)
	if err != nil {
		return err
	}
	cfg.NoSchedulers = mode == modeIPTables
	client, reload, err := newSource(ctx, o, log)
	if err != nil {
		return err
	}

	dp, err := newDataplane(o, mode, log)
	if err != nil {
		return err
	}
	applyKernelSettings(o, mode, log)

	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	broadcaster.StartEventWatcher(func(e *corev1.Event) {
		log.Info("event", "type", e.Type, "reason", e.Reason, "object",
			e.InvolvedObject.Kind+" "+e.InvolvedObject.Namespace+"/"+e.InvolvedObject.Name, "message", e.Message)
	})
	defer broadcaster.Shutdown()
	recorder := broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "kube-ipvs", Host: cfg.NodeName})
	if blocking != nil {
		nodeFallbackEvent(recorder, cfg.NodeName, blocking)
	}

	hostAddrs := func() ([]netip.Addr, error) { return nodeaddr.List(o.dummyInterface) }
	obs := controller.Observers{}
	if !o.once {
		obs.Metrics = metrics.New()
		obs.Metrics.SetProxyMode(mode)
		obs.ProxyHealth = healthcheck.NewProxyHealth(cfg.SyncPeriod)
		obs.ServiceHealth = healthcheck.NewServiceHealth(obs.ProxyHealth.Live)
		defer obs.ServiceHealth.Close()
	}
	ctl, err := controller.New(cfg, client, dp, hostAddrs, recorder, obs, log)
	if err != nil {
		return err
	}
	if o.once {
		return ctl.SyncOnce(ctx)
	}
	if mode == modeIPVS {
		if err := obs.Metrics.EnableServiceStats(ipvsStats, ctl.LookupVS, metrics.StatsLimits{}); err != nil {
			return err
		}
	}
	serveHTTP(ctx, "metrics", o.metricsAddress, obs.Metrics.Serve, log)
	serveHTTP(ctx, "health", o.healthzAddress, obs.ProxyHealth.Serve, log)
	if reload != nil {
		go reloadOnHUP(ctx, reload, log)
	}
	log.Info("kube-ipvs started", "mode", mode, "node", cfg.NodeName, "scheduler", cfg.DefaultScheduler,
		"sync_period", cfg.SyncPeriod, "min_sync_period", cfg.MinSyncPeriod, "manifests", o.manifests)
	return ctl.Run(ctx)
}

// serveHTTP runs one of the proxy's HTTP servers in the background. A server that cannot
// listen is logged loudly; the proxy keeps programming the kernel without it.
func serveHTTP(ctx context.Context, what, addr string, serve func(context.Context, string) error, log *slog.Logger) {
	if addr == "" {
		return
	}
	go func() {
		if err := serve(ctx, addr); err != nil && ctx.Err() == nil {
			log.Error("HTTP server stopped", "server", what, "address", addr, "err", err)
		}
	}()
	log.Info("serving", "server", what, "address", addr)
}

// ipvsStats adapts the IPVS counters dump to the metrics package.
func ipvsStats() ([]metrics.VSStats, error) {
	st, err := ipvs.ListStats()
	if err != nil {
		return nil, err
	}
	out := make([]metrics.VSStats, len(st))
	for i, s := range st {
		out[i] = metrics.VSStats{Key: s.Key, Connections: s.Connections, PacketsIn: s.PacketsIn,
			PacketsOut: s.PacketsOut, BytesIn: s.BytesIn, BytesOut: s.BytesOut}
	}
	return out, nil
}

// applyKernelSettings sets the sysctls and IPVS timeouts the proxy needs. A failure is logged
// with the setting and what breaks without it; the proxy still runs, since most Services
// work without the failed setting and a retry at the next start may succeed.
func applyKernelSettings(o runOptions, mode string, log *slog.Logger) {
	var uts unix.Utsname
	release := ""
	if unix.Uname(&uts) == nil {
		release = unix.ByteSliceToString(uts.Release[:])
	}
	settings := sysctl.ForProxy(release, sysctl.Options{StrictARP: o.strictARP})
	if mode != modeIPVS {
		// Without ip_vs there is no net.ipv4.vs.* to set.
		settings = slices.DeleteFunc(settings, func(s sysctl.Setting) bool { return strings.HasPrefix(s.Name, "net.ipv4.vs.") })
	}
	changed, err := sysctl.Apply(settings)
	for _, s := range changed {
		log.Info("sysctl set", "name", s.Name, "value", s.Value, "why", s.Why)
	}
	if err != nil {
		log.Error("setting kernel parameters failed", "err", err)
	}
	if mode != modeIPVS {
		return
	}
	if set, err := ipvs.SetTimeouts(ipvs.Timeouts{TCP: o.tcpTimeout, TCPFin: o.tcpFinTimeout, UDP: o.udpTimeout}); err != nil {
		log.Error("setting IPVS timeouts failed", "err", err)
	} else if set {
		log.Info("IPVS timeouts set", "tcp", o.tcpTimeout, "tcpfin", o.tcpFinTimeout, "udp", o.udpTimeout)
	}
}

// newSource returns the clientset the informers read: a real API server's, or a fake one
// filled from --manifests (with a function that re-reads them).
func newSource(ctx context.Context, o runOptions, log *slog.Logger) (kubernetes.Interface, func(), error) {
	if o.manifests == "" {
		rc, err := clientcmd.BuildConfigFromFlags("", o.kubeconfig)
		if err != nil {
			return nil, nil, fmt.Errorf("kubeconfig: %w", err)
		}
		rc.UserAgent = "kube-ipvs/" + version
		cs, err := kubernetes.NewForConfig(rc)
		return cs, nil, err
	}
	cs := fake.NewClientset()
	var current manifests.Objects
	load := func() {
		objs, err := manifests.Load(o.manifests)
		if err != nil {
			// Bad documents are named; everything that parsed still applies.
			log.Error("manifests have errors; the valid objects are applied", "path", o.manifests, "err", err)
		}
		if objs == nil {
			return
		}
		if err := manifests.Sync(ctx, cs, current, objs); err != nil {
			log.Error("applying manifests", "path", o.manifests, "err", err)
		}
		current = objs
		log.Info("manifests loaded", "path", o.manifests, "objects", len(objs))
	}
	load()
	return cs, load, nil
}

func reloadOnHUP(ctx context.Context, reload func(), log *slog.Logger) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			log.Info("SIGHUP: re-reading manifests")
			reload()
		}
	}
}

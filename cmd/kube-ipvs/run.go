package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"

	"github.com/kube-ipvs/kube-ipvs/backendcheck"
	"github.com/kube-ipvs/kube-ipvs/config"
	"github.com/kube-ipvs/kube-ipvs/controller"
	"github.com/kube-ipvs/kube-ipvs/dataplane/ipvsmode"
	"github.com/kube-ipvs/kube-ipvs/dummyif"
	"github.com/kube-ipvs/kube-ipvs/healthcheck"
	"github.com/kube-ipvs/kube-ipvs/ipvs"
	"github.com/kube-ipvs/kube-ipvs/manifests"
	"github.com/kube-ipvs/kube-ipvs/metrics"
	"github.com/kube-ipvs/kube-ipvs/sysctl"
)

// runOptions are the flags of `kube-ipvs run` and what controllerConfig derives from them.
type runOptions struct {
	config.Options
	ipvsMode ipvsmode.Config // derived from the flags by controllerConfig
	logLevel slog.Level      // derived from --log-level by controllerConfig
	// rateEstimation is --ipvs-rate-estimation, derived by controllerConfig.
	rateEstimation sysctl.RateEstimation
	// localFromNode is --detect-local-mode=NodeCIDR, derived by controllerConfig: the
	// local CIDRs are the Node's spec.podCIDRs, read at start (see localdetect.go).
	localFromNode bool
	lockFile      string // --lock-file: held while the proxy runs (see lock.go)
}

func runFlags(o *runOptions) *pflag.FlagSet {
	fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
	fs.SortFlags = false
	o.AddFlags(fs)
	fs.StringVar(&o.lockFile, "lock-file", defaultLockFile, "file the proxy holds a shared flock on while it runs, so that `kube-ipvs cleanup` refuses to run meanwhile (empty: none)")
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
	if code, ok := parseArgs(fs, args, stderr); !ok {
		return code
	}
	warnings, err := o.ReadConfigFile(fs)
	if err != nil {
		fmt.Fprintf(stderr, "kube-ipvs run: --config %s: %v\n", o.ConfigFile, err)
		return 2
	}
	cfg, err := o.controllerConfig()
	if err != nil {
		fmt.Fprintf(stderr, "kube-ipvs run: %v\n", err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: o.logLevel}))
	for _, w := range warnings {
		log.Warn("config file", "file", o.ConfigFile, "warning", w)
	}
	if err := serve(o, cfg, stderr, log); err != nil {
		log.Error("kube-ipvs stopped", "err", err)
		return 1
	}
	return 0
}

// controllerConfig validates the options and derives the controller's and the IPVS mode's
// configuration from them.
func (o *runOptions) controllerConfig() (controller.Config, error) {
	p, err := o.Validate()
	if err != nil {
		return controller.Config{}, err
	}
	cfg := controller.Config{
		NodeName:          o.HostnameOverride,
		DefaultScheduler:  o.Scheduler,
		SyncPeriod:        o.SyncPeriod,
		MinSyncPeriod:     o.MinSyncPeriod,
		RepairStep:        o.RepairStep,
		NodePortPrimary:   p.NodePortPrimary,
		NodePortAddresses: p.NodePortAddresses,
		PrimaryNodeIP:     p.PrimaryNodeIP,
		ServiceCIDRs:      p.ServiceCIDRs,
		ConfigSyncPeriod:  o.ConfigSyncPeriod,
	}
	if cfg.NodeName == "" {
		h, err := os.Hostname()
		if err != nil {
			return cfg, fmt.Errorf("--hostname-override is empty and the host name is unknown: %v", err)
		}
		cfg.NodeName = strings.ToLower(h)
	}
	o.logLevel = p.LogLevel
	o.ipvsMode.ExcludeCIDRs = p.ExcludeCIDRs
	o.ipvsMode.Firewall.ClusterCIDRs = p.ClusterCIDRs
	o.ipvsMode.Firewall.LocalInterface = p.LocalInterface
	o.localFromNode = p.LocalFromNode
	o.ipvsMode.Firewall.MasqueradeAll = o.MasqueradeAll
	o.ipvsMode.Firewall.MasqueradeMark = p.MasqueradeMark
	// IPv4 always; IPv6 where the kernel has it, or ip6tables and IPv6 sets would fail on
	// every sync of an IPv4-only node.
	o.ipvsMode.Firewall.IPv4 = true
	_, err = os.Stat("/proc/sys/net/ipv6/conf/all")
	o.ipvsMode.Firewall.IPv6 = err == nil
	o.ipvsMode.NodePortMin, o.ipvsMode.NodePortMax = p.NodePortMin, p.NodePortMax
	o.ipvsMode.VIPBinding = p.VIPBinding
	o.rateEstimation = p.RateEstimation
	return cfg, nil
}

// serve builds the source, the reconcilers and the controller, and runs until a signal.
func serve(o runOptions, cfg controller.Config, stderr io.Writer, log *slog.Logger) error {
	sigCtx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	// fatal stops the proxy from a background task (--bind-address-hard-fail, a changed
	// NodeCIDR): serve returns its error.
	ctx, fatal := context.WithCancelCause(sigCtx)
	defer fatal(nil)
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

	if o.localFromNode {
		cidrs, err := watchPodCIDRs(ctx, client, cfg.NodeName, fatal, log)
		if err != nil {
			return err
		}
		o.ipvsMode.Firewall.ClusterCIDRs = cidrs
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

	hostAddrs := func() ([]netip.Addr, error) { return dummyif.NodeAddresses(o.DummyInterface) }
	obs := controller.Observers{}
	if !o.Once {
		obs.Metrics = metrics.New()
		obs.Metrics.SetProxyMode(mode)
		obs.ProxyHealth = healthcheck.NewProxyHealth(cfg.SyncPeriod)
		obs.ServiceHealth = healthcheck.NewServiceHealth(obs.ProxyHealth.Live)
		defer obs.ServiceHealth.Close()
		if mode == modeIPVS {
			// Checks run from this process, so from the node's network namespace.
			cfg.BackendChecks = backendcheck.New(backendcheck.Options{Observer: obs.Metrics})
		}
	}
	if o.CleanupKubeProxy && !o.Once { // Validate refuses both; --once has no metrics
		obs.FirstRepair = startKubeProxyCleanup(ctx, cfg.NodeName, recorder, obs.Metrics, log)
	}
	ctl, err := controller.New(cfg, client, dp, hostAddrs, recorder, obs, log)
	if err != nil {
		return err
	}
	if o.Once {
		return ctl.SyncOnce(ctx)
	}
	if mode == modeIPVS {
		if err := obs.Metrics.EnableServiceStats(ipvsStats, ctl.LookupVS, metrics.StatsLimits{}); err != nil {
			return err
		}
	}
	hardFail := fatal
	if !o.BindAddressHardFail {
		hardFail = nil
	}
	serveHTTP(ctx, "metrics", o.MetricsAddress, obs.Metrics.Serve, hardFail, log)
	serveState(ctx, o, cfg.NodeName, mode, cfg.NodePortAddresses, ctl, dp, log)
	serveHTTP(ctx, "health", o.HealthzAddress, obs.ProxyHealth.Serve, hardFail, log)
	if reload != nil {
		go reloadOnHUP(ctx, reload, log)
	}
	handover, _ := dp.(*ipvsmode.Dataplane)
	if o.HandoverFile == "" {
		handover = nil
	}
	if handover != nil {
		takeHandover(handover, o.HandoverFile, log)
	}
	log.Info("kube-ipvs started", "mode", mode, "node", cfg.NodeName, "scheduler", cfg.DefaultScheduler,
		"sync_period", cfg.SyncPeriod, "min_sync_period", cfg.MinSyncPeriod, "manifests", o.Manifests)
	err = ctl.Run(ctx)
	if cause := context.Cause(ctx); cause != nil && sigCtx.Err() == nil {
		return cause // a fatal background error, not a signal
	}
	if handover != nil && ctx.Err() != nil { // a clean stop: the loop wrote its last
		leaveHandover(handover, o.HandoverFile, log)
	}
	return err
}

// takeHandover gives the dataplane a predecessor's handover (see ipvsmode.LoadHandover).
// Without one the first sync reads the kernel whole, as after a crash: slower, never wrong.
func takeHandover(dp *ipvsmode.Dataplane, path string, log *slog.Logger) {
	n, err := dp.LoadHandover(path)
	switch {
	case err != nil:
		log.Warn("handover not used: the first sync reads every virtual server back", "file", path, "err", err)
	case n > 0:
		log.Info("handover taken: the first sync reads back only the virtual servers it does not hold as listed", "file", path, "virtual_servers", n)
	}
}

// leaveHandover writes the handover for the next start.
func leaveHandover(dp *ipvsmode.Dataplane, path string, log *slog.Logger) {
	n, err := dp.SaveHandover(path)
	if err != nil {
		log.Warn("handover not written: the next start reads every virtual server back", "file", path, "err", err)
		return
	}
	log.Info("handover written for the next start", "file", path, "virtual_servers", n)
}

// serveHTTP runs one of the proxy's HTTP servers in the background. A server that cannot
// listen is logged loudly; the proxy keeps programming the kernel without it, unless fatal
// is set (--bind-address-hard-fail): then it stops the proxy with the error.
func serveHTTP(ctx context.Context, what, addr string, serve func(context.Context, string) error, fatal context.CancelCauseFunc, log *slog.Logger) {
	if addr == "" {
		return
	}
	go func() {
		if err := serve(ctx, addr); err != nil && ctx.Err() == nil {
			log.Error("HTTP server stopped", "server", what, "address", addr, "err", err)
			if fatal != nil {
				fatal(fmt.Errorf("--bind-address-hard-fail: the %s server on %s stopped: %w", what, addr, err))
			}
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
	settings := sysctl.ForProxy(release, sysctl.Options{StrictARP: o.StrictARP, RateEstimation: o.rateEstimation})
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
	if set, err := ipvs.SetTimeouts(ipvs.Timeouts{TCP: o.TCPTimeout, TCPFin: o.TCPFinTimeout, UDP: o.UDPTimeout}); err != nil {
		log.Error("setting IPVS timeouts failed", "err", err)
	} else if set {
		log.Info("IPVS timeouts set", "tcp", o.TCPTimeout, "tcpfin", o.TCPFinTimeout, "udp", o.UDPTimeout)
	}
}

// newSource returns the clientset the informers read: a real API server's, or a fake one
// filled from --manifests (with a function that re-reads them).
func newSource(ctx context.Context, o runOptions, log *slog.Logger) (kubernetes.Interface, func(), error) {
	if o.Manifests == "" {
		rc, err := clientcmd.BuildConfigFromFlags("", o.Kubeconfig)
		if err != nil {
			return nil, nil, fmt.Errorf("kubeconfig: %w", err)
		}
		rc.UserAgent = "kube-ipvs/" + version
		// kube-proxy's clientConnection; zero values keep client-go's defaults.
		rc.QPS, rc.Burst = o.KubeAPIQPS, o.KubeAPIBurst
		rc.ContentType, rc.AcceptContentTypes = o.KubeAPIContentType, o.KubeAPIAcceptContentTypes
		cs, err := kubernetes.NewForConfig(rc)
		return cs, nil, err
	}
	cs := manifests.NewClientset()
	var current manifests.Objects
	load := func() {
		objs, err := manifests.Load(o.Manifests)
		if err != nil {
			// Bad documents are named; everything that parsed still applies.
			log.Error("manifests have errors; the valid objects are applied", "path", o.Manifests, "err", err)
		}
		if objs == nil {
			return
		}
		if err := manifests.Sync(ctx, cs, current, objs); err != nil {
			log.Error("applying manifests", "path", o.Manifests, "err", err)
		}
		current = objs
		log.Info("manifests loaded", "path", o.Manifests, "objects", len(objs))
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

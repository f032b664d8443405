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
	"strconv"
	"strings"
	"syscall"

	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"

	"github.com/kube-ipvs/kube-ipvs/backendcheck"
	"github.com/kube-ipvs/kube-ipvs/config"
	"github.com/kube-ipvs/kube-ipvs/controller"
	"github.com/kube-ipvs/kube-ipvs/dataplane"
	"github.com/kube-ipvs/kube-ipvs/dataplane/ipvsmode"
	"github.com/kube-ipvs/kube-ipvs/dummyif"
	"github.com/kube-ipvs/kube-ipvs/healthcheck"
	"github.com/kube-ipvs/kube-ipvs/internal/foreground"
	"github.com/kube-ipvs/kube-ipvs/ipvs"
	"github.com/kube-ipvs/kube-ipvs/metrics"
	"github.com/kube-ipvs/kube-ipvs/modules"
	"github.com/kube-ipvs/kube-ipvs/preflight"
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
	// conntrack is the --conntrack-* flags, derived by controllerConfig.
	conntrack sysctl.Conntrack
	lockFile  string // --lock-file: held while the proxy runs (see lock.go)
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
	log := newLogger(o.LoggingFormat, stderr, o.logLevel)
	for _, w := range warnings {
		log.Warn("config file", "file", o.ConfigFile, "warning", w)
	}
	if o.InitOnly {
		if err := initOnly(o, stderr, log); err != nil {
			log.Error("kube-ipvs run --init-only failed", "err", err)
			return 1
		}
		return 0
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
	// One foreground gate for the process: the controller raises it while a change is
	// applied, and the IPVS mode's background listings park at it.
	gate := foreground.NewGate()
	cfg.Gate, o.ipvsMode.Gate = gate, gate
	o.rateEstimation = p.RateEstimation
	o.conntrack = p.Conntrack
	return cfg, nil
}

// newLogger writes text (key=value) or kube-proxy's JSON lines.
func newLogger(format string, w io.Writer, level slog.Level) *slog.Logger {
	if format == config.LogFormatJSON {
		return slog.New(newKlogJSON(w, level))
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
}

// initOnly is `run --init-only`: the part of a start that needs a writable /proc/sys and
// /sys, and the capability to load modules (a privileged init container), so that the proxy
// itself can run with NET_ADMIN and NET_RAW alone. It loads the modules (the preflight, as a
// start does), sets the sysctls and conntrack limits, and returns. Like a start, it falls
// back to the iptables mode's settings when IPVS cannot run under --mode=auto, and fails
// under --mode=ipvs.
func initOnly(o runOptions, stderr io.Writer, log *slog.Logger) error {
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer cancel()
	mode, _, err := chooseMode(ctx, o, stderr, log)
	if err != nil {
		return err
	}
	if err := applyKernelSettings(o, mode, log); err != nil {
		return err
	}
	log.Info("kube-ipvs run --init-only done: modules loaded, sysctls and conntrack limits set", "mode", mode)
	return nil
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

	mode, blocking, err := prepareNode(ctx, o, stderr, log)
	if err != nil {
		return err
	}
	cfg.NoSchedulers = mode == modeIPTables
	if mode == modeIPTables {
		cfg.RepairStep = 0 // the fallback's repair is one step (iptproxy): every repair is whole
	}
	// Before the source: its discovery request and the informers' lists and watches are
	// the process's first API requests, and rest_client_* counts them all.
	obs, err := newObservers(o, &cfg, mode)
	if err != nil {
		return err
	}
	if obs.ServiceHealth != nil {
		defer obs.ServiceHealth.Close()
	}
	src, err := newSource(ctx, o, log)
	if err != nil {
		return err
	}

	if o.localFromNode { // detectLocalMode NodeCIDR: the Node's podCIDRs are the local ones
		if o.ipvsMode.Firewall.ClusterCIDRs, err = watchPodCIDRs(ctx, src.lws.Nodes, cfg.NodeName, fatal, log); err != nil {
			return err
		}
	}
	dp, err := newDataplane(o, mode, log)
	if err != nil {
		return err
	}

	recorder, stopEvents := newRecorder(ctx, src, cfg.NodeName, log)
	defer stopEvents()
	if blocking != nil {
		nodeFallbackEvent(recorder, cfg.NodeName, blocking)
	}

	hostAddrs := func() ([]netip.Addr, error) { return dummyif.NodeAddresses(o.DummyInterface) }
	if o.CleanupKubeProxy && !o.Once { // Validate refuses both; --once has no metrics
		obs.FirstRepair = startKubeProxyCleanup(ctx, cfg.NodeName, recorder, obs.Metrics, log)
	}
	ctl, err := controller.NewFromListerWatchers(cfg, src.lws, dp, hostAddrs, recorder, obs, log)
	if err != nil {
		return err
	}
	if o.Once {
		return ctl.SyncOnce(ctx)
	}
	if err := startServers(ctx, o, cfg, mode, obs, ctl, dp, src, fatal, log); err != nil {
		return err
	}
	handover := handoverOf(dp, o.HandoverFile)
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

// prepareNode chooses the mode (IPVS, or the iptables fallback and the reason IPVS cannot
// work), then sets the kernel settings and the OOM score. It runs before anything waits on
// the API server, so that a refused sysctl stops the start at once.
func prepareNode(ctx context.Context, o runOptions, stderr io.Writer, log *slog.Logger) (string, []preflight.Row, error) {
	mode, blocking, err := chooseMode(ctx, o, stderr, log)
	if err != nil {
		return "", nil, err
	}
	if err := applyKernelSettings(o, mode, log); err != nil {
		return "", nil, err
	}
	applyOOMScoreAdj(o.OOMScoreAdj, log)
	return mode, blocking, nil
}

// startServers starts what serves the running proxy: the per-Service IPVS counters, the
// metrics, state and health endpoints, and the manifests' reload on SIGHUP.
func startServers(ctx context.Context, o runOptions, cfg controller.Config, mode string, obs controller.Observers,
	ctl *controller.Controller, dp dataplane.Dataplane, src source, fatal context.CancelCauseFunc, log *slog.Logger) error {
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
	if src.reload != nil {
		go reloadOnHUP(ctx, src.reload, log)
	}
	return nil
}

// handoverOf is dp when it takes and leaves a handover file (the IPVS mode, with a path).
func handoverOf(dp dataplane.Dataplane, path string) *ipvsmode.Dataplane {
	handover, _ := dp.(*ipvsmode.Dataplane)
	if path == "" {
		return nil
	}
	return handover
}

// newObservers builds the metrics and health observers of a long-running proxy (--once has
// none), and the IPVS mode's backend checker, which reports to the metrics.
func newObservers(o runOptions, cfg *controller.Config, mode string) (controller.Observers, error) {
	obs := controller.Observers{}
	if o.Once {
		return obs, nil
	}
	obs.Metrics = metrics.New()
	obs.Metrics.SetProxyMode(mode)
	if err := obs.Metrics.EnableRESTClientMetrics(); err != nil {
		return obs, err
	}
	obs.ProxyHealth = healthcheck.NewProxyHealth(cfg.SyncPeriod)
	obs.ProxyHealth.OnServed(obs.Metrics.ProxyHealthServed)
	obs.ServiceHealth = healthcheck.NewServiceHealth(obs.ProxyHealth.Live)
	if mode == modeIPVS {
		// Checks run from this process, so from the node's network namespace.
		cfg.BackendChecks = backendcheck.New(backendcheck.Options{Observer: obs.Metrics})
	}
	return obs, nil
}

// newRecorder returns the Event recorder: Events go to the API server when there is one,
// and to the log always. stop flushes and ends the broadcaster.
func newRecorder(ctx context.Context, src source, node string, log *slog.Logger) (record.EventRecorder, func()) {
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	if src.client != nil {
		broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: src.client.CoreV1().Events("")})
	}
	broadcaster.StartEventWatcher(func(e *corev1.Event) {
		log.Info("event", "type", e.Type, "reason", e.Reason, "object",
			e.InvolvedObject.Kind+" "+e.InvolvedObject.Namespace+"/"+e.InvolvedObject.Name, "message", e.Message)
	})
	return broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "kube-ipvs", Host: node}), broadcaster.Shutdown
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

// applyKernelSettings sets the sysctls, conntrack limits and IPVS timeouts the proxy needs.
// A setting that is wrong and that this process may not change (a container that is not
// privileged mounts /proc/sys and /sys read-only) is an error naming it: the proxy would
// otherwise run with, say, a conntrack table too small for the node, or IPVS connections
// that outlive their real server, and nobody would know. Other failures (a setting this
// kernel lacks) are logged with what breaks without them, and the proxy runs: most Services
// work without them.
func applyKernelSettings(o runOptions, mode string, log *slog.Logger) error {
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
	if ct := sysctl.ForConntrack(o.conntrack, sysctl.CPUs()); len(ct) > 0 {
		loadConntrack(log)
		if sysctl.TableSizeIsHosts() {
			ct = slices.DeleteFunc(ct, func(s sysctl.Setting) bool {
				if !s.AtLeast {
					return false
				}
				log.Warn("conntrack table size left alone: this process is not in the host's network namespace, and only the host's may size the table", "name", s.Name, "wanted_at_least", s.Value)
				return true
			})
		}
		settings = append(settings, ct...)
	}
	changed, err := sysctl.Apply(settings)
	for _, s := range changed {
		log.Info("sysctl set", "name", s.Name, "value", s.Value, "why", s.Why)
	}
	var refuse []string
	for _, e := range sysctl.Errors(err) {
		if e.Unwritable() {
			refuse = append(refuse, e.Error())
			continue
		}
		log.Error("setting a kernel parameter failed", "err", e)
	}
	if len(refuse) > 0 {
		fix := "run `kube-ipvs run --init-only` with the same configuration as root in a privileged init container first (deploy/daemonset.yaml does), or set the value on the node"
		if o.InitOnly {
			fix = "--init-only must run as root in a privileged container: container runtimes mount /proc/sys and /sys read-only in any other"
		}
		return fmt.Errorf("kernel settings the proxy needs are wrong and this process cannot change them: %s; %s", strings.Join(refuse, "; "), fix)
	}
	if mode != modeIPVS {
		return nil
	}
	if set, err := ipvs.SetTimeouts(ipvs.Timeouts{TCP: o.TCPTimeout, TCPFin: o.TCPFinTimeout, UDP: o.UDPTimeout}); err != nil {
		log.Error("setting IPVS timeouts failed", "err", err)
	} else if set {
		log.Info("IPVS timeouts set", "tcp", o.TCPTimeout, "tcpfin", o.TCPFinTimeout, "udp", o.UDPTimeout)
	}
	return nil
}

// loadConntrack loads nf_conntrack when its sysctls are absent: the preflight loads it in
// IPVS mode, but --mode=iptables runs no preflight and its rules load it only at the first
// sync, after the conntrack limits are set.
func loadConntrack(log *slog.Logger) {
	if _, err := sysctl.Get(sysctl.ConntrackMaxName); err == nil {
		return
	}
	if err := modules.Modprobe(context.Background(), modules.Conntrack); err != nil {
		log.Warn("nf_conntrack is not loaded and modprobe failed: the conntrack limits cannot be set", "err", err)
	}
}

// applyOOMScoreAdj writes --oom-score-adj (kube-proxy's oomScoreAdj) to this process. A
// failure is a warning, as in kube-proxy: the proxy works, only the kernel's choice under
// memory pressure changes.
func applyOOMScoreAdj(score int, log *slog.Logger) {
	const file = "/proc/self/oom_score_adj"
	if cur, err := os.ReadFile(file); err == nil && strings.TrimSpace(string(cur)) == strconv.Itoa(score) {
		return
	}
	if err := os.WriteFile(file, []byte(strconv.Itoa(score)), 0o644); err != nil {
		log.Warn("oom_score_adj not set: under memory pressure the kernel may kill the proxy before other processes (a value below the one the container runtime gave needs CAP_SYS_RESOURCE)",
			"oom_score_adj", score, "err", err)
		return
	}
	log.Info("oom_score_adj set", "oom_score_adj", score)
}

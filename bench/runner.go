package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"

	"github.com/kube-ipvs/kube-ipvs/conntrack"
	"github.com/kube-ipvs/kube-ipvs/controller"
	"github.com/kube-ipvs/kube-ipvs/dataplane/ipvsmode"
	"github.com/kube-ipvs/kube-ipvs/dummyif"
	"github.com/kube-ipvs/kube-ipvs/firewall"
	"github.com/kube-ipvs/kube-ipvs/healthcheck"
	"github.com/kube-ipvs/kube-ipvs/internal/foreground"
	"github.com/kube-ipvs/kube-ipvs/ipset"
	"github.com/kube-ipvs/kube-ipvs/metrics"
	"github.com/kube-ipvs/kube-ipvs/model"
	"github.com/kube-ipvs/kube-ipvs/sysctl"
)

// Options configure one Run.
type Options struct {
	// N is the number of Services.
	N int
	// Reps is how often each single change is measured; FullReps how often the full
	// resync is (0: not at all; the churn runs repair cycles anyway).
	Reps, FullReps int
	// MinSyncPeriod is the controller's --min-sync-period. The bench uses 0 so that each
	// change is measured alone: with the default 1s, a Service and its EndpointSlice
	// created within a second are applied a second apart.
	MinSyncPeriod time.Duration
	// Progress receives human-readable progress lines (nil: none).
	Progress io.Writer
	// HeapProfile, if set, receives a heap profile taken right after the cold start.
	HeapProfile io.Writer
	// ChurnHeapProfiles, if set, receive heap profiles taken as the churn begins and as it
	// ends: their alloc_space difference is what the churn and its repair cycles allocated
	// (go tool pprof -sample_index=alloc_space -diff_base BEGIN END).
	ChurnHeapProfiles [2]io.Writer
	// ResyncProfile, if set, receives a CPU profile of the full resyncs alone.
	ResyncProfile io.Writer
	// Timeout bounds every single wait for the kernel.
	Timeout time.Duration
	// Binding is --vip-binding (default address).
	Binding dummyif.Binding
	// RateEstimation is --ipvs-rate-estimation (default kernel).
	RateEstimation sysctl.RateEstimation
	// RepairStep is --repair-step (0: repairs in one go). The bench passes the default.
	RepairStep int
	// Churn configures the stream of endpoint changes run after the restart (zero Rate:
	// none).
	Churn ChurnOptions
	// SlowTrace asks for execution traces of the churn's slow changes (zero: none).
	SlowTrace SlowTrace
	// NoForegroundGate runs the proxy without a foreground gate (a nil one: background
	// listings never park), to measure what the gate does for the churn.
	NoForegroundGate bool
}

// DummyInterface is the dummy link's name, as in production.
const DummyInterface = "kube-ipvs0"

// drainTimeout is --graceful-termination-timeout's default.
const drainTimeout = 30 * time.Second

// runner holds one bench run's wiring.
type runner struct {
	o       Options
	res     *Result
	client  *fake.Clientset
	ctl     *controller.Controller
	dp      *ipvsmode.Dataplane // the controller's
	stopCtl context.CancelFunc  // stops ctl (a restart starts another)
	ctlDone chan error          // ctl's Run's return
	metrics *metrics.Metrics
	probe   *probe // a separate IPVS handle: reads only, never counted as writes
	ctx     context.Context
	log     func(format string, args ...any)

	heapMu   sync.Mutex
	heapPeak uint64
}

// Run builds the proxy on a fake clientset holding o.N Services and measures it. It must run
// as root in a network namespace of its own (the bench script makes one per N) that has a
// link with NodeIP on it and no kube-ipvs0 yet.
func Run(ctx context.Context, o Options) (*Result, error) {
	if o.N <= 0 {
		return nil, errors.New("N must be positive")
	}
	if o.Reps <= 0 {
		o.Reps = 5
	}
	if o.Timeout <= 0 {
		o.Timeout = 30 * time.Minute
	}
	if o.Binding == "" {
		o.Binding = dummyif.BindAddress
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r := &runner{o: o, ctx: ctx, res: &Result{
		N: o.N, Expected: Expect(o.N), Changes: map[string][]Sample{}, CPUs: runtime.NumCPU(),
		GoVersion: runtime.Version(), Kernel: kernelRelease(), MemTotalMiB: memTotalMiB(), GoMemLimitBytes: goMemLimit(),
		MinSyncPeriodSec: o.MinSyncPeriod.Seconds(), Binding: string(o.Binding), RepairStep: o.RepairStep,
		RateEstimation: rateEstimationOf(o.RateEstimation), ForegroundGate: gateOf(o.NoForegroundGate),
	}}
	r.log = func(format string, args ...any) {
		if o.Progress != nil {
			fmt.Fprintf(o.Progress, "bench n=%d: %s\n", o.N, fmt.Sprintf(format, args...))
		}
	}
	if _, err := netlink.LinkByName(DummyInterface); err == nil {
		return nil, fmt.Errorf("%s already exists: run the bench in a fresh network namespace", DummyInterface)
	}
	go r.sampleHeap(ctx)

	if err := r.populate(); err != nil {
		return nil, err
	}
	// The single changes run without periodic repairs (a full one is measured on its own,
	// asked for by a Node change), so that each is measured on an idle proxy.
	if err := r.wire(ctx, idleSyncPeriod); err != nil {
		return nil, err
	}
	if err := r.coldStart(ctx); err != nil {
		return r.res, err
	}
	if err := r.changes(); err != nil {
		return r.res, err
	}
	// Memory as the cold start and the single changes left it: the restart below runs a
	// second controller in the same process.
	r.res.PeakRSSBytes = vmHWM()
	r.heapMu.Lock()
	r.res.HeapPeakBytes = r.heapPeak
	r.heapMu.Unlock()
	r.res.KernelSlabBytes = slabBytes()
	if err := r.restart(ctx); err != nil {
		return r.res, err
	}
	if r.o.Churn.Rate > 0 {
		if err := r.churn(); err != nil {
			return r.res, err
		}
	}
	r.res.PeakRSSEndBytes = vmHWM()
	return r.res, nil
}

// idleSyncPeriod is the first controller's --sync-period: long enough that no periodic
// repair runs while the single changes are measured.
const idleSyncPeriod = 24 * time.Hour

// defaultSyncPeriod is --sync-period's default, which the restarted controller runs with.
const defaultSyncPeriod = 30 * time.Second

// populate fills the fake clientset's store directly (its tracker), as if the API server
// already held the cluster when the proxy starts. The fake is the plain tracker
// (NewSimpleClientset): NewClientset's field manager costs milliseconds per write under
// emulation, which a change's measured latency (the clock starts before the write) would
// count as the proxy's, and a real API server's write cost is not the proxy's either.
func (r *runner) populate() error {
	start := time.Now()
	r.client = fake.NewSimpleClientset()
	tr := r.client.Tracker()
	if err := tr.Add(Node()); err != nil {
		return fmt.Errorf("add the node: %w", err)
	}
	js := DefaultEndpoints()
	for i := range r.o.N {
		if err := tr.Add(Service(i)); err != nil {
			return fmt.Errorf("add Service %d: %w", i, err)
		}
		if err := tr.Add(EndpointSlice(i, js...)); err != nil {
			return fmt.Errorf("add EndpointSlice %d: %w", i, err)
		}
	}
	r.res.PopulateSeconds = time.Since(start).Seconds()
	r.res.HeapAPIBytes = liveHeap()
	r.log("populated the fake clientset in %.1fs (live heap %s)", r.res.PopulateSeconds, mib(r.res.HeapAPIBytes))
	// In production the store is the API server's, not in the proxy's process: the proxy
	// gets its limit (GOMEMLIMIT, as deploy/daemonset.yaml sets it) on top of the store, or
	// the store's share would push it to the limit early and the garbage collector would run
	// all the time (at 50k Services the store is about 170 MiB).
	if lim := goMemLimit(); lim > 0 {
		debug.SetMemoryLimit(lim + int64(r.res.HeapAPIBytes))
		r.log("Go memory limit: %s for the proxy + %s for the store", mib(uint64(lim)), mib(r.res.HeapAPIBytes))
	}
	return nil
}

// wire builds the proxy as cmd/kube-ipvs's serve does: the same dataplane (ipvsmode.New),
// kernel settings, event recorder, observers and controller.New.
func (r *runner) wire(ctx context.Context, syncPeriod time.Duration) error {
	if _, err := sysctl.Apply(sysctl.ForProxy(kernelRelease(), sysctl.Options{RateEstimation: r.o.RateEstimation})); err != nil {
		r.log("setting kernel parameters: %v", err)
	}
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: r.client.CoreV1().Events("")})
	go func() { <-ctx.Done(); broadcaster.Shutdown() }()
	recorder := broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "kube-ipvs", Host: NodeName})

	cfg := controller.Config{
		NodeName:         NodeName,
		DefaultScheduler: "rr",
		SyncPeriod:       syncPeriod,
		MinSyncPeriod:    r.o.MinSyncPeriod,
		RepairStep:       r.o.RepairStep,
	}
	// Without the go_* and process_* collectors: the churn gathers the metrics five times a
	// second (a scrape is every 15 s or more), and those read /proc and the runtime's
	// statistics inside the measured process.
	r.metrics = metrics.New(metrics.WithoutRuntimeMetrics())
	r.metrics.SetProxyMode(metrics.ModeIPVS)
	ph := healthcheck.NewProxyHealth(cfg.SyncPeriod)
	sh := healthcheck.NewServiceHealth(ph.Live)
	go func() { <-ctx.Done(); sh.Close() }()
	obs := controller.Observers{Metrics: r.metrics, ProxyHealth: ph, ServiceHealth: sh}
	// The proxy logs every sync at info level; the bench keeps warnings, errors and the
	// repair cycles' lines (which say where a cycle's longest step went).
	log := slog.New(cycleLines{slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})})
	// One foreground gate, as cmd/kube-ipvs makes: raised by the controller, parked at by
	// the dataplane's background listings.
	if !r.o.NoForegroundGate {
		cfg.Gate = foreground.NewGate()
	}
	dp, err := ipvsmode.New(ipvsmode.Config{Firewall: firewall.Config{ClusterCIDRs: []netip.Prefix{ClusterCIDR}},
		NodePortMin: NodePortBase, NodePortMax: NodePortMax, VIPBinding: r.o.Binding, Gate: cfg.Gate}, DummyInterface, drainTimeout, "", conntrack.Cleaner{}, log)
	if err != nil {
		return fmt.Errorf("IPVS mode: %w", err)
	}
	r.dp = dp
	hostAddrs := func() ([]netip.Addr, error) { return dummyif.NodeAddresses(DummyInterface) }
	r.ctl, err = controller.New(cfg, r.client, dp, hostAddrs, recorder, obs, log)
	if err != nil {
		return err
	}
	if r.probe == nil {
		r.probe, err = newProbe()
	}
	return err
}

// start runs the controller until stopCtl, its Run's return on ctlDone.
func (r *runner) start(ctx context.Context) {
	cctx, cancel := context.WithCancel(ctx)
	r.stopCtl, r.ctlDone = cancel, make(chan error, 1)
	go func(ctl *controller.Controller, done chan<- error) { done <- ctl.Run(cctx) }(r.ctl, r.ctlDone)
}

// coldStart starts the controller and waits until the kernel holds the whole cluster: every
// virtual server with its real servers, and every address, set entry and rule, which the
// first full sync has written when it ends (the addresses are bound while IPVS is written,
// and may well finish last).
func (r *runner) coldStart(ctx context.Context) error {
	before := r.writes()
	// The reconciler applies virtual servers in key order, so the one with the largest key
	// is written last: once it has all its real servers, IPVS is through.
	last := r.lastKey()
	start := time.Now()
	r.start(ctx)
	done := r.ctlDone
	cpu0 := readCPU()
	err := r.waitKernel(func() (bool, error) {
		reals, err := r.probe.reals(last)
		return len(reals) == EndpointsPerService, err
	}, 200*time.Millisecond)
	if err != nil {
		return fmt.Errorf("cold start: %w", err)
	}
	select {
	case err := <-done:
		return fmt.Errorf("the controller stopped: %v", err)
	default:
	}
	// The first sync's own figures: Stats tells the latest sync, so they are taken as soon
	// as it is the first.
	var firstSync controller.Stats
	if err := r.waitKernel(func() (bool, error) {
		st := r.ctl.Stats()
		if st.TotalSyncs == 1 {
			firstSync = st
		}
		return st.TotalSyncs >= 1, nil
	}, 20*time.Millisecond); err != nil {
		return fmt.Errorf("cold start: the first sync did not end: %w", err)
	}
	took := time.Since(start)
	r.res.ColdStartCPU = readCPU().since(cpu0)
	st := r.settle()
	if firstSync.TotalSyncs == 1 {
		st = firstSync
	} else {
		r.log("cold start: a second sync ended before the first one's figures were read; those below are the latest sync's")
	}
	ph := st.Phases
	r.res.ColdStart = Sample{Seconds: took.Seconds(), Writes: diff(r.writes(), before), SyncSeconds: st.Duration.Seconds(), PhaseSeconds: phaseSeconds(ph)}
	r.log("cold start: %.2fs, writes %v (first full sync %.2fs: build %.1fs, firewall %.1fs, addresses %.1fs, ipvs %.1fs)", took.Seconds(), r.res.ColdStart.Writes, st.Duration.Seconds(),
		ph.Build.Seconds(), ph.Firewall.Seconds(), ph.Addresses.Seconds(), ph.IPVS.Seconds())
	r.res.HeapLiveBytes = liveHeap()
	if r.o.HeapProfile != nil {
		_ = pprof.Lookup("heap").WriteTo(r.o.HeapProfile, 0)
	}
	r.verify()
	return nil
}

// lastKey is the largest virtual server key of the populated cluster.
func (r *runner) lastKey() model.VSKey {
	var last model.VSKey
	for i := r.o.N - 1; i >= 0; i-- {
		sh := ShapeOf(i)
		keys := []model.VSKey{{Addr: ClusterIP(i), Proto: model.TCP, Port: 80}}
		if sh.TwoPorts {
			keys = append(keys, model.VSKey{Addr: ClusterIP(i), Proto: model.TCP, Port: 443})
		}
		if sh.NodePort {
			for p := range sh.Ports() {
				keys = append(keys, model.VSKey{Addr: NodeIP, Proto: model.TCP, Port: NodePort(i, p)})
			}
		}
		for _, k := range keys {
			if last == (model.VSKey{}) || model.VSKeyLess(last, k) {
				last = k
			}
		}
	}
	return last
}

// verify reads the whole kernel state back and records it; differences from the expected
// state are errors of the run.
func (r *runner) verify() {
	start := time.Now()
	found := KernelCounts{SetEntries: map[string]int{}}
	// Through a netlink socket of its own, one virtual server at a time (/proc/net/ip_vs
	// would do, but the kernel serves it in pages and walks the service table from the start
	// for each: quadratic, minutes at 50,000 Services).
	if err := r.countIPVS(&found); err != nil {
		r.fail("listing virtual servers: %v", err)
	}
	if l, err := netlink.LinkByName(DummyInterface); err != nil {
		r.fail("%s: %v", DummyInterface, err)
	} else if n, err := boundVIPs(l, r.o.Binding); err != nil {
		r.fail("listing the VIPs bound through %s: %v", DummyInterface, err)
	} else {
		found.Addresses = n
	}
	if k, err := ipset.NewKernel(); err != nil {
		r.fail("ipset: %v", err)
	} else {
		hs, err := k.ListHeaders()
		if err != nil {
			r.fail("listing ipsets: %v", err)
		}
		for _, h := range hs {
			found.SetEntries[string(h.Name)] = int(h.Entries)
			if h.Name == firewall.SetLoopBack {
				found.LoopBackMaxElem = int(h.MaxElem)
			}
		}
		k.Close()
	}
	r.res.Found = found
	e := r.res.Expected
	check := func(what string, got, want int) {
		if got != want {
			r.fail("after the cold start the kernel has %d %s, want %d", got, what, want)
		}
	}
	check("virtual servers", found.VirtualServers, e.VirtualServers)
	check("real servers", found.RealServers, e.RealServers)
	check("VIPs bound through "+DummyInterface+" ("+string(r.o.Binding)+")", found.Addresses, e.Addresses)
	check("entries in "+firewall.SetClusterIP, found.SetEntries[firewall.SetClusterIP], e.ClusterIPEntries)
	check("entries in "+firewall.SetNodePort, found.SetEntries[firewall.SetNodePort], e.NodePortEntries)
	check("entries in "+firewall.SetVIPs, found.SetEntries[firewall.SetVIPs], e.VIPEntries)
	check("entries in "+firewall.SetLoopBack, found.SetEntries[firewall.SetLoopBack], e.LoopBackEntries)
	r.log("verified the kernel in %.1fs: %d virtual servers, %d real servers, %d VIPs bound (%s), %d hairpin entries (maxelem %d)",
		time.Since(start).Seconds(), found.VirtualServers, found.RealServers, found.Addresses, r.o.Binding,
		found.SetEntries[firewall.SetLoopBack], found.LoopBackMaxElem)
}

func (r *runner) fail(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	r.res.Errors = append(r.res.Errors, msg)
	r.log("ERROR: %s", msg)
}

// countIPVS counts the kernel's virtual and real servers; a real server not at weight 1 is
// an error of the run (every endpoint is ready).
func (r *runner) countIPVS(found *KernelCounts) error {
	vses, reals, bad, err := countIPVS()
	found.VirtualServers, found.RealServers = vses, reals
	if err == nil && bad > 0 {
		r.fail("%d real servers are not at weight 1", bad)
	}
	return err
}

// cycleLines passes on warnings, errors and the repair cycles' info lines.
type cycleLines struct{ slog.Handler }

func (h cycleLines) Handle(ctx context.Context, r slog.Record) error {
	if r.Level < slog.LevelWarn && r.Message != "repair cycle done" {
		return nil
	}
	return h.Handler.Handle(ctx, r)
}

func (h cycleLines) WithAttrs(as []slog.Attr) slog.Handler {
	return cycleLines{h.Handler.WithAttrs(as)}
}

func (h cycleLines) WithGroup(name string) slog.Handler { return cycleLines{h.Handler.WithGroup(name)} }

// rateEstimationOf is the result's rate_estimation: empty for the kernel's own.
func rateEstimationOf(r sysctl.RateEstimation) string {
	if r == sysctl.RateEstimationKernel {
		return ""
	}
	return string(r)
}

package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/netip"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	"github.com/kube-ipvs/kube-ipvs/ipset"
	"github.com/kube-ipvs/kube-ipvs/ipvs"
	"github.com/kube-ipvs/kube-ipvs/metrics"
	"github.com/kube-ipvs/kube-ipvs/model"
	"github.com/kube-ipvs/kube-ipvs/sysctl"
)

// Options configure one Run.
type Options struct {
	// N is the number of Services.
	N int
	// Reps is how often each single change is measured; FullReps how often the full
	// resync is.
	Reps, FullReps int
	// MinSyncPeriod is the controller's --min-sync-period. The bench uses 0 so that each
	// change is measured alone: with the default 1s, a Service and its EndpointSlice
	// created within a second are applied a second apart.
	MinSyncPeriod time.Duration
	// Progress receives human-readable progress lines (nil: none).
	Progress io.Writer
	// HeapProfile, if set, receives a heap profile taken right after the cold start.
	HeapProfile io.Writer
	// ResyncProfile, if set, receives a CPU profile of the full resyncs alone.
	ResyncProfile io.Writer
	// Timeout bounds every single wait for the kernel.
	Timeout time.Duration
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
	if o.FullReps == 0 {
		o.FullReps = 3
	}
	if o.Timeout <= 0 {
		o.Timeout = 30 * time.Minute
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r := &runner{o: o, ctx: ctx, res: &Result{
		N: o.N, Expected: Expect(o.N), Changes: map[string][]Sample{}, CPUs: runtime.NumCPU(),
		GoVersion: runtime.Version(), Kernel: kernelRelease(), MemTotalMiB: memTotalMiB(), GoMemLimitBytes: goMemLimit(),
		MinSyncPeriodSec: o.MinSyncPeriod.Seconds(),
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
	if err := r.wire(ctx); err != nil {
		return nil, err
	}
	if err := r.coldStart(ctx); err != nil {
		return r.res, err
	}
	if err := r.changes(); err != nil {
		return r.res, err
	}
	r.res.PeakRSSBytes = vmHWM()
	r.heapMu.Lock()
	r.res.HeapPeakBytes = r.heapPeak
	r.heapMu.Unlock()
	r.res.KernelSlabBytes = slabBytes()
	return r.res, nil
}

// populate fills the fake clientset's store directly (its tracker), as if the API server
// already held the cluster when the proxy starts: creating 100,000 objects through the fake
// clientset's field manager would take hours under emulation.
func (r *runner) populate() error {
	start := time.Now()
	r.client = fake.NewClientset()
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
	return nil
}

// wire builds the proxy as cmd/kube-ipvs's serve does: the same dataplane (ipvsmode.New),
// kernel settings, event recorder, observers and controller.New.
func (r *runner) wire(ctx context.Context) error {
	if _, err := sysctl.Apply(sysctl.ForProxy(kernelRelease(), sysctl.Options{})); err != nil {
		r.log("setting kernel parameters: %v", err)
	}
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: r.client.CoreV1().Events("")})
	go func() { <-ctx.Done(); broadcaster.Shutdown() }()
	recorder := broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "kube-ipvs", Host: NodeName})

	cfg := controller.Config{
		NodeName:         NodeName,
		DefaultScheduler: "rr",
		SyncPeriod:       24 * time.Hour, // full resyncs are measured on their own
		MinSyncPeriod:    r.o.MinSyncPeriod,
	}
	r.metrics = metrics.New()
	r.metrics.SetProxyMode(metrics.ModeIPVS)
	ph := healthcheck.NewProxyHealth(cfg.SyncPeriod)
	sh := healthcheck.NewServiceHealth(ph.Live)
	go func() { <-ctx.Done(); sh.Close() }()
	obs := controller.Observers{Metrics: r.metrics, ProxyHealth: ph, ServiceHealth: sh}
	// The proxy logs every sync at info level; the bench keeps warnings and errors.
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	dp, err := ipvsmode.New(ipvsmode.Config{Firewall: firewall.Config{ClusterCIDRs: []netip.Prefix{ClusterCIDR}},
		NodePortMin: NodePortBase, NodePortMax: NodePortMax}, DummyInterface, drainTimeout, "", conntrack.Cleaner{}, log)
	if err != nil {
		return fmt.Errorf("IPVS mode: %w", err)
	}
	hostAddrs := func() ([]netip.Addr, error) { return dummyif.NodeAddresses(DummyInterface) }
	r.ctl, err = controller.New(cfg, r.client, dp, hostAddrs, recorder, obs, log)
	if err != nil {
		return err
	}
	r.probe, err = newProbe()
	return err
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
	done := make(chan error, 1)
	go func() { done <- r.ctl.Run(ctx) }()
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
	} else if addrs, err := netlink.AddrList(l, netlink.FAMILY_ALL); err != nil {
		r.fail("listing the addresses of %s: %v", DummyInterface, err)
	} else {
		found.Addresses = len(addrs)
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
	check("addresses on "+DummyInterface, found.Addresses, e.Addresses)
	check("entries in "+firewall.SetClusterIP, found.SetEntries[firewall.SetClusterIP], e.ClusterIPEntries)
	check("entries in "+firewall.SetNodePort, found.SetEntries[firewall.SetNodePort], e.NodePortEntries)
	check("entries in "+firewall.SetVIPs, found.SetEntries[firewall.SetVIPs], e.VIPEntries)
	check("entries in "+firewall.SetLoopBack, found.SetEntries[firewall.SetLoopBack], e.LoopBackEntries)
	r.log("verified the kernel in %.1fs: %d virtual servers, %d real servers, %d addresses, %d hairpin entries (maxelem %d)",
		time.Since(start).Seconds(), found.VirtualServers, found.RealServers, found.Addresses,
		found.SetEntries[firewall.SetLoopBack], found.LoopBackMaxElem)
}

func (r *runner) fail(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	r.res.Errors = append(r.res.Errors, msg)
	r.log("ERROR: %s", msg)
}

// changes measures the single changes, interleaved by repetition so that noise from other
// guests on the machine spreads over all kinds alike.
func (r *runner) changes() error {
	for rep := range r.o.Reps {
		// A one-port ClusterIP Service (i%10 == 2) spread over the cluster.
		i := (rep*r.o.N/r.o.Reps)/10*10 + 2
		if i >= r.o.N {
			i = 2
		}
		if err := r.endpointChange(rep, i); err != nil {
			return err
		}
		if err := r.noop(rep, i); err != nil {
			return err
		}
		// A new Service beyond the populated ones, of the same shape.
		if err := r.serviceAddDelete(r.o.N + 10*rep + 2); err != nil {
			return err
		}
	}
	if r.o.ResyncProfile != nil {
		if err := pprof.StartCPUProfile(r.o.ResyncProfile); err == nil {
			defer pprof.StopCPUProfile()
		}
	}
	for rep := range r.o.FullReps {
		if err := r.fullResync(rep); err != nil {
			return err
		}
	}
	for _, k := range Kinds {
		s := Summarize(r.res.Latencies(k))
		w := Summarize(r.res.Writes(k))
		r.log("%-16s median %8.2f ms (%.2f-%.2f), writes median %.0f (%.0f-%.0f)", k, 1000*s.Median, 1000*s.Min, 1000*s.Max, w.Median, w.Min, w.Max)
	}
	return nil
}

func (r *runner) record(kind string, s Sample) {
	r.res.Changes[kind] = append(r.res.Changes[kind], s)
	r.log("%s: %.2f ms (api %.2f ms, sync %.2f ms), writes %v", kind, 1000*s.Seconds, 1000*s.APISeconds, 1000*s.SyncSeconds, s.Writes)
}

// endpointChange adds one endpoint to Service i and removes it again.
func (r *runner) endpointChange(rep, i int) error {
	key := HTTPKey(i)
	j := EndpointsPerService + rep%6
	rs := RealServer(i, j)
	slices := r.client.DiscoveryV1().EndpointSlices(Namespace)

	// Add.
	r.quiet()
	before, syncs := r.writes(), r.ctl.Stats().TotalSyncs
	start := time.Now()
	if _, err := slices.Update(r.ctx, EndpointSlice(i, append(DefaultEndpoints(), j)...), metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("add an endpoint: %w", err)
	}
	api := time.Since(start)
	if err := r.waitKernel(func() (bool, error) {
		reals, err := r.probe.reals(key)
		return reals[rs] == 1, err
	}, pollInterval); err != nil {
		return fmt.Errorf("endpoint add: %w", err)
	}
	took := time.Since(start)
	st := r.settleAfter(syncs)
	r.record(KindEndpointAdd, Sample{Seconds: took.Seconds(), APISeconds: api.Seconds(), Writes: diff(r.writes(), before), SyncSeconds: st.Seconds()})

	// Remove: weight 0 at once (TCP drains), deleted when the drain sees no connection.
	r.quiet()
	before, syncs = r.writes(), r.ctl.Stats().TotalSyncs
	start = time.Now()
	if _, err := slices.Update(r.ctx, EndpointSlice(i, DefaultEndpoints()...), metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("remove an endpoint: %w", err)
	}
	api = time.Since(start)
	if err := r.waitKernel(func() (bool, error) {
		reals, err := r.probe.reals(key)
		w, has := reals[rs]
		return err == nil && (!has || w == 0), err
	}, pollInterval); err != nil {
		return fmt.Errorf("endpoint remove: %w", err)
	}
	took = time.Since(start)
	st = r.settleAfter(syncs)
	if err := r.waitKernel(func() (bool, error) {
		reals, err := r.probe.reals(key)
		_, has := reals[rs]
		return err == nil && !has, err
	}, 20*time.Millisecond); err != nil {
		return fmt.Errorf("endpoint drain: %w", err)
	}
	r.settle()
	r.record(KindEndpointRemove, Sample{Seconds: took.Seconds(), APISeconds: api.Seconds(), Writes: diff(r.writes(), before), SyncSeconds: st.Seconds()})
	return nil
}

// noop changes an annotation the proxy does not read: Service i is recomputed, and nothing
// may be written.
func (r *runner) noop(rep, i int) error {
	r.quiet()
	before, syncs := r.writes(), r.ctl.Stats().TotalSyncs
	svc := Service(i)
	svc.Annotations = map[string]string{"bench.kube-ipvs.io/touched": strconv.Itoa(rep)}
	start := time.Now()
	if _, err := r.client.CoreV1().Services(Namespace).Update(r.ctx, svc, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("touch a Service: %w", err)
	}
	api := time.Since(start)
	if err := r.waitKernel(func() (bool, error) { return r.ctl.Stats().TotalSyncs > syncs, nil }, pollInterval); err != nil {
		return fmt.Errorf("no-op sync: %w", err)
	}
	took := time.Since(start)
	st := r.settleAfter(syncs)
	r.record(KindNoop, Sample{Seconds: took.Seconds(), APISeconds: api.Seconds(), Writes: diff(r.writes(), before), SyncSeconds: st.Seconds()})
	return nil
}

// serviceAddDelete creates Service i (then its EndpointSlice, as the endpoint controller
// would), waits for the kernel to serve it, then deletes the Service and, once the kernel
// dropped it, the EndpointSlice.
func (r *runner) serviceAddDelete(i int) error {
	key := HTTPKey(i)
	svcs := r.client.CoreV1().Services(Namespace)
	slices := r.client.DiscoveryV1().EndpointSlices(Namespace)

	r.quiet()
	before, syncs := r.writes(), r.ctl.Stats().TotalSyncs
	start := time.Now()
	if _, err := svcs.Create(r.ctx, Service(i), metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create a Service: %w", err)
	}
	api := time.Since(start)
	t := time.Now()
	if _, err := slices.Create(r.ctx, EndpointSlice(i, DefaultEndpoints()...), metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create an EndpointSlice: %w", err)
	}
	api += time.Since(t)
	if err := r.waitKernel(func() (bool, error) {
		reals, err := r.probe.reals(key)
		return len(reals) == EndpointsPerService, err
	}, pollInterval); err != nil {
		return fmt.Errorf("service add: %w", err)
	}
	took := time.Since(start)
	st := r.settleAfter(syncs)
	r.record(KindServiceAdd, Sample{Seconds: took.Seconds(), APISeconds: api.Seconds(), Writes: diff(r.writes(), before), SyncSeconds: st.Seconds()})

	r.quiet()
	before, syncs = r.writes(), r.ctl.Stats().TotalSyncs
	start = time.Now()
	if err := svcs.Delete(r.ctx, ServiceName(i), metav1.DeleteOptions{}); err != nil {
		return fmt.Errorf("delete a Service: %w", err)
	}
	api = time.Since(start)
	if err := r.waitKernel(func() (bool, error) {
		ok, err := r.probe.exists(key)
		return !ok && err == nil, err
	}, pollInterval); err != nil {
		return fmt.Errorf("service delete: %w", err)
	}
	took = time.Since(start)
	// The slice goes after the Service, as the garbage collector removes it in a cluster:
	// deleted first, it would empty the virtual server (and drain it) before it goes.
	if err := slices.Delete(r.ctx, EndpointSlice(i).Name, metav1.DeleteOptions{}); err != nil {
		return fmt.Errorf("delete an EndpointSlice: %w", err)
	}
	st = r.settleAfter(syncs)
	r.record(KindServiceDelete, Sample{Seconds: took.Seconds(), APISeconds: api.Seconds(), Writes: diff(r.writes(), before), SyncSeconds: st.Seconds()})
	return nil
}

// fullResync changes a label of the Node: the controller recomputes every Service and
// repairs the kernel against a dump, as every --sync-period.
func (r *runner) fullResync(rep int) error {
	r.quiet()
	before, syncs := r.writes(), r.ctl.Stats().TotalSyncs
	node := Node()
	node.Labels["bench.kube-ipvs.io/resync"] = strconv.Itoa(rep)
	start := time.Now()
	if _, err := r.client.CoreV1().Nodes().Update(r.ctx, node, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("update the Node: %w", err)
	}
	api := time.Since(start)
	if err := r.waitKernel(func() (bool, error) {
		st := r.ctl.Stats()
		return st.TotalSyncs > syncs && st.Full, nil
	}, 5*time.Millisecond); err != nil {
		return fmt.Errorf("full resync: %w", err)
	}
	took := time.Since(start)
	ph := r.ctl.Stats().Phases
	r.log("full-resync phases: build %.0f ms, firewall %.0f ms, addresses %.0f ms, ipvs %.0f ms",
		ms64(ph.Build), ms64(ph.Firewall), ms64(ph.Addresses), ms64(ph.IPVS))
	st := r.settleAfter(syncs)
	r.record(KindFullResync, Sample{Seconds: took.Seconds(), APISeconds: api.Seconds(), Writes: diff(r.writes(), before), SyncSeconds: st.Seconds(),
		PhaseSeconds: phaseSeconds(ph)})
	return nil
}

// phaseSeconds is a full sync's time by step, in seconds.
func phaseSeconds(ph controller.FullSyncPhases) map[string]float64 {
	return map[string]float64{"build": ph.Build.Seconds(), "firewall": ph.Firewall.Seconds(), "addresses": ph.Addresses.Seconds(), "ipvs": ph.IPVS.Seconds()}
}

// pollInterval is how often the kernel is read while a single change is awaited: each read
// is one netlink request, cheap next to the change itself.
const pollInterval = 2 * time.Millisecond

// waitKernel polls cond every interval until it holds, fails, or the run's timeout passes.
func (r *runner) waitKernel(cond func() (bool, error), interval time.Duration) error {
	deadline := time.Now().Add(r.o.Timeout)
	var lastErr error
	for {
		ok, err := cond()
		if ok {
			return nil
		}
		if err != nil {
			lastErr = err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not there after %s (last error: %v)", r.o.Timeout, lastErr)
		}
		if r.ctx.Err() != nil {
			return r.ctx.Err()
		}
		time.Sleep(interval)
	}
}

// settle waits until no sync has happened and no write was counted for a while, and returns
// the last sync's statistics.
func (r *runner) settle() controller.Stats {
	const still = 300 * time.Millisecond
	st, w := r.ctl.Stats(), r.writes()
	for {
		time.Sleep(still)
		st2, w2 := r.ctl.Stats(), r.writes()
		if st2.TotalSyncs == st.TotalSyncs && equal(w, w2) {
			return st2
		}
		st, w = st2, w2
	}
}

// settleAfter settles and returns the summed duration of the syncs after the syncs-th.
// Only the last sync's duration is known, so with several syncs it is that one's times
// their number (they are alike: the Service's and its slice's).
func (r *runner) settleAfter(syncs int) time.Duration {
	st := r.settle()
	n := st.TotalSyncs - syncs
	if n < 1 {
		n = 1
	}
	return time.Duration(n) * st.Duration
}

// quiet waits for the controller to be idle before a measurement.
func (r *runner) quiet() {
	r.settle()
	runtime.GC()
}

// writes reads the controller's netlink_writes_total by subsystem.
func (r *runner) writes() map[string]int {
	out := map[string]int{}
	fams, err := r.metrics.Registry().Gather()
	if err != nil {
		return out
	}
	for _, f := range fams {
		if f.GetName() != metrics.Namespace+"_netlink_writes_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "subsystem" {
					out[l.GetValue()] += int(m.GetCounter().GetValue())
				}
			}
		}
	}
	return out
}

func diff(after, before map[string]int) map[string]int {
	out := map[string]int{}
	for _, s := range Subsystems {
		out[s] = after[s] - before[s]
	}
	return out
}

func equal(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func (r *runner) sampleHeap(ctx context.Context) {
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	var ms runtime.MemStats
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		runtime.ReadMemStats(&ms)
		r.heapMu.Lock()
		r.heapPeak = max(r.heapPeak, ms.HeapInuse)
		r.heapMu.Unlock()
	}
}

func liveHeap() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// vmHWM is the process's peak resident set size.
func vmHWM() uint64 { return procStatusKB("/proc/self/status", "VmHWM:") * 1024 }

func memTotalMiB() int { return int(procStatusKB("/proc/meminfo", "MemTotal:") / 1024) }

// slabBytes is the kernel's slab memory (IPVS, addresses, routes and sets live there).
func slabBytes() uint64 { return procStatusKB("/proc/meminfo", "Slab:") * 1024 }

func procStatusKB(path, field string) uint64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				v, _ := strconv.ParseUint(f[0], 10, 64)
				return v
			}
		}
	}
	return 0
}

func kernelRelease() string {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return ""
	}
	return unix.ByteSliceToString(u.Release[:])
}

func mib(b uint64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }

// countIPVS counts the kernel's virtual and real servers; a real server not at weight 1 is
// an error of the run (every endpoint is ready).
func (r *runner) countIPVS(found *KernelCounts) error {
	k, err := ipvs.NewKernel()
	if err != nil {
		return err
	}
	defer k.(io.Closer).Close()
	each, ok := k.(interface {
		EachVirtualServer(start func(), fn func(*model.VirtualServer)) error
	})
	if !ok {
		return errors.New("the IPVS kernel cannot list one virtual server at a time")
	}
	badWeight := 0
	err = each.EachVirtualServer(func() { found.VirtualServers, found.RealServers, badWeight = 0, 0, 0 },
		func(vs *model.VirtualServer) {
			found.VirtualServers++
			found.RealServers += len(vs.Reals)
			for _, w := range vs.Reals {
				if w != 1 {
					badWeight++
				}
			}
		})
	if err == nil && badWeight > 0 {
		r.fail("%d real servers are not at weight 1", badWeight)
	}
	return err
}

func ms64(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// goMemLimit is the runtime's soft memory limit (GOMEMLIMIT), 0 if none is set.
func goMemLimit() int64 {
	if l := debug.SetMemoryLimit(-1); l != math.MaxInt64 {
		return l
	}
	return 0
}

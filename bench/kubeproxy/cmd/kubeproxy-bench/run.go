package main

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/component-base/metrics/testutil"
	"k8s.io/kubernetes/pkg/proxy"
	kubeproxyconfig "k8s.io/kubernetes/pkg/proxy/apis/config"
	proxymetrics "k8s.io/kubernetes/pkg/proxy/metrics"

	"github.com/kube-ipvs/kube-ipvs/bench"
	"github.com/kube-ipvs/kube-ipvs/model"
)

// pollInterval is how often the kernel is read while a single change is awaited, as
// kube-ipvs' bench does.
const pollInterval = 2 * time.Millisecond

// dummyInterface is the link kube-proxy's IPVS mode binds the Service addresses to.
const dummyInterface = "kube-ipvs0"

var families = []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}

type run struct {
	ctx     context.Context
	n, reps int
	timeout time.Duration
	res     *bench.KubeProxyResult
	p       proxy.Provider
	probe   *bench.Probe
}

func (r *run) log(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "kubeproxy-bench n=%d: %s\n", r.n, fmt.Sprintf(format, args...))
}

func (r *run) fail(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	r.res.Errors = append(r.res.Errors, msg)
	r.log("ERROR: %s", msg)
}

// all runs the whole measurement: cold start, the kernel read back, then the single changes
// interleaved by repetition as kube-ipvs' bench does.
func (r *run) all() error {
	if _, err := os.Stat("/sys/class/net/" + dummyInterface); err == nil {
		return fmt.Errorf("%s already exists: run the bench in a fresh network namespace", dummyInterface)
	}
	proxymetrics.RegisterMetrics(kubeproxyconfig.ProxyModeIPVS)
	var err error
	if r.probe, err = bench.NewProbe(); err != nil {
		return err
	}
	if err := r.coldStart(); err != nil {
		return err
	}
	r.verify()
	for rep := range r.reps {
		// The same one-port ClusterIP Services (i%10 == 2) as kube-ipvs' bench changes.
		i := (rep*r.n/r.reps)/10*10 + 2
		if i >= r.n {
			i = 2
		}
		if err := r.endpointChange(rep, i); err != nil {
			return err
		}
		if err := r.noChange(); err != nil {
			return err
		}
	}
	for _, k := range []string{bench.KindEndpointAdd, bench.KindEndpointRemove, bench.KindKubeProxySync} {
		var xs []float64
		for _, s := range r.res.Changes[k] {
			xs = append(xs, s.Seconds)
		}
		s := bench.Summarize(xs)
		r.log("%-16s median %9.2f ms (%.2f-%.2f)", k, 1000*s.Median, 1000*s.Min, 1000*s.Max)
	}
	return nil
}

// coldStart builds the proxier, then (the clock running) starts its SyncLoop and hands it
// every object as kube-proxy's informers would on start, each Service and EndpointSlice
// added, then the two synced calls, the second of which runs the first full sync of each
// family. It ends when the kernel holds the last virtual server with all its real servers
// and kube-proxy's first sync of both families has ended (its own sync latency histogram
// counts it). kube-ipvs' clock also starts after its dataplane and controller are built.
//
// The Node is not fed: its labels matter only to topology hints, which the slices do not
// carry, and OnTopologyChange would queue one more full sync.
func (r *run) coldStart() error {
	svcs := make([]*v1.Service, r.n)
	slices := make([]*discoveryv1.EndpointSlice, r.n)
	for i := range r.n {
		svcs[i], slices[i] = bench.Service(i), bench.EndpointSlice(i, bench.DefaultEndpoints()...)
	}
	t := time.Now()
	p, err := newProxier(r.ctx)
	if err != nil {
		return err
	}
	r.p = p
	r.res.ConstructSeconds = time.Since(t).Seconds()
	r.log("built the proxier in %.2fs", r.res.ConstructSeconds)
	runtime.GC()

	last := bench.HTTPKey(r.n - 1)
	start := time.Now()
	go p.SyncLoop()
	fed := make(chan time.Duration, 1)
	go func() {
		for _, s := range svcs {
			p.OnServiceAdd(s)
		}
		for _, s := range slices {
			p.OnEndpointSliceAdd(s)
		}
		p.OnServiceSynced()
		p.OnEndpointSlicesSynced()
		fed <- time.Since(start)
	}()
	// kube-proxy walks its Services in map order, so no key is written last: once both
	// families' first syncs ended every virtual server is in, and the last Service's must
	// then show all its real servers (verify reads back the rest).
	next := start.Add(30 * time.Second)
	if err := r.wait(func() (bool, error) {
		n4, n6 := syncs(v1.IPv4Protocol), syncs(v1.IPv6Protocol)
		reals, err := r.probe.Reals(last)
		if time.Now().After(next) {
			next = next.Add(30 * time.Second)
			r.log("cold start: %.0fs, syncs ended IPv4 %d IPv6 %d, %v has %d real servers", time.Since(start).Seconds(), n4, n6, last, len(reals))
		}
		return n4 >= 1 && n6 >= 1 && len(reals) == bench.EndpointsPerService, err
	}, 200*time.Millisecond); err != nil {
		return fmt.Errorf("cold start: %w", err)
	}
	took := time.Since(start)
	r.res.ColdStart = bench.Sample{Seconds: took.Seconds(), SyncSeconds: syncSeconds(v1.IPv4Protocol)}
	r.log("cold start: %.2fs (first IPv4 sync %.2fs, IPv6 %.2fs)", took.Seconds(), syncSeconds(v1.IPv4Protocol), syncSeconds(v1.IPv6Protocol))
	select {
	case d := <-fed:
		r.log("the synced calls returned after %.2fs", d.Seconds())
	case <-time.After(r.timeout):
		return fmt.Errorf("cold start: the synced calls did not return within %v", r.timeout)
	}
	if n := syncs(v1.IPv4Protocol); n != 1 {
		r.log("%d IPv4 syncs during the cold start", n)
	}
	// A sync that failed is counted too, and is retried only a --sync-period later.
	for _, fam := range families {
		if ts, err := testutil.GetGaugeMetricValue(proxymetrics.SyncProxyRulesLastTimestamp.WithLabelValues(string(fam))); err != nil || ts < float64(start.Unix()) {
			r.fail("kube-proxy's first %s sync did not succeed", fam)
		}
	}
	return nil
}

// verify reads the kernel back after the cold start: kube-proxy must have written at least
// what kube-ipvs writes for the same objects (it may add virtual servers on further node
// addresses).
func (r *run) verify() {
	start := time.Now()
	found, bad, err := bench.CountKernel(dummyInterface)
	r.res.Found = found
	if err != nil {
		r.fail("reading the kernel back: %v", err)
		return
	}
	e := r.res.Expected
	if found.VirtualServers < e.VirtualServers || found.RealServers < e.RealServers || found.Addresses < e.Addresses {
		r.fail("after the cold start the kernel has %d virtual servers, %d real servers, %d addresses; want at least %d, %d, %d",
			found.VirtualServers, found.RealServers, found.Addresses, e.VirtualServers, e.RealServers, e.Addresses)
	}
	if bad > 0 {
		r.fail("%d real servers are not at weight 1", bad)
	}
	if ok, err := r.probe.Exists(bench.LastKey(r.n)); !ok {
		r.fail("the kernel lacks %v (%v), the last virtual server kube-ipvs writes", bench.LastKey(r.n), err)
	}
	r.log("verified the kernel in %.1fs: %d virtual servers, %d real servers, %d addresses, sets %v",
		time.Since(start).Seconds(), found.VirtualServers, found.RealServers, found.Addresses, found.SetEntries)
}

// endpointChange adds endpoint j to Service i's slice through OnEndpointSliceUpdate, until
// the kernel shows its real server; then removes it, until the kernel has it at weight 0 or
// gone. Each waits for the sync to end before the next step, and records its duration.
func (r *run) endpointChange(rep, i int) error {
	key := bench.HTTPKey(i)
	j := bench.EndpointsPerService + rep%6
	rs := bench.RealServer(i, j)
	old, added := bench.EndpointSlice(i, bench.DefaultEndpoints()...), bench.EndpointSlice(i, append(bench.DefaultEndpoints(), j)...)

	s, err := r.change(bench.KindEndpointAdd, func() { r.p.OnEndpointSliceUpdate(old, added) }, func(reals map[model.RSKey]uint32) bool {
		return reals[rs] == 1
	}, key)
	if err != nil {
		return err
	}
	r.record(bench.KindEndpointAdd, s)
	s, err = r.change(bench.KindEndpointRemove, func() { r.p.OnEndpointSliceUpdate(added, old) }, func(reals map[model.RSKey]uint32) bool {
		w, has := reals[rs]
		return !has || w == 0
	}, key)
	if err != nil {
		return err
	}
	r.record(bench.KindEndpointRemove, s)
	return nil
}

// change applies one change to the IPv4 proxier and times it until the kernel shows it, then
// waits for that sync to end.
func (r *run) change(kind string, apply func(), shown func(map[model.RSKey]uint32) bool, key model.VSKey) (bench.Sample, error) {
	runtime.GC()
	n0, sum0 := syncs(v1.IPv4Protocol), syncSeconds(v1.IPv4Protocol)
	start := time.Now()
	apply()
	if err := r.wait(func() (bool, error) {
		reals, err := r.probe.Reals(key)
		return err == nil && shown(reals), err
	}, pollInterval); err != nil {
		return bench.Sample{}, fmt.Errorf("%s: %w", kind, err)
	}
	took := time.Since(start)
	if err := r.wait(func() (bool, error) { return syncs(v1.IPv4Protocol) > n0, nil }, pollInterval); err != nil {
		return bench.Sample{}, fmt.Errorf("%s: the sync did not end: %w", kind, err)
	}
	n := syncs(v1.IPv4Protocol) - n0
	if n != 1 {
		r.log("%s: %d syncs", kind, n)
	}
	return bench.Sample{Seconds: took.Seconds(), SyncSeconds: syncSeconds(v1.IPv4Protocol) - sum0}, nil
}

// noChange asks for a sync with nothing changed (Sync, which kube-proxy's periodic timer and
// every handler call): both families sync in full; it ends when both syncs have.
func (r *run) noChange() error {
	runtime.GC()
	n4, n6, sum0 := syncs(v1.IPv4Protocol), syncs(v1.IPv6Protocol), syncSeconds(v1.IPv4Protocol)
	start := time.Now()
	r.p.Sync()
	if err := r.wait(func() (bool, error) {
		return syncs(v1.IPv4Protocol) > n4 && syncs(v1.IPv6Protocol) > n6, nil
	}, pollInterval); err != nil {
		return fmt.Errorf("sync with no change: %w", err)
	}
	r.record(bench.KindKubeProxySync, bench.Sample{Seconds: time.Since(start).Seconds(), SyncSeconds: syncSeconds(v1.IPv4Protocol) - sum0})
	return nil
}

func (r *run) record(kind string, s bench.Sample) {
	r.res.Changes[kind] = append(r.res.Changes[kind], s)
	r.log("%s: %.2f ms (IPv4 sync %.2f ms)", kind, 1000*s.Seconds, 1000*s.SyncSeconds)
}

// wait polls cond every interval until it holds, or the run's timeout passes.
func (r *run) wait(cond func() (bool, error), interval time.Duration) error {
	return bench.Poll(r.ctx, r.timeout, interval, cond)
}

// syncs is how many syncs of a family have ended: kube-proxy's own
// sync_proxy_rules_duration_seconds count, observed as syncProxyRules returns.
func syncs(fam v1.IPFamily) uint64 {
	n, _ := testutil.GetHistogramMetricCount(proxymetrics.SyncProxyRulesLatency.WithLabelValues(string(fam)))
	return n
}

// syncSeconds is the summed duration of a family's syncs so far.
func syncSeconds(fam v1.IPFamily) float64 {
	s, _ := testutil.GetHistogramMetricValue(proxymetrics.SyncProxyRulesLatency.WithLabelValues(string(fam)))
	return s
}

package bench

import (
	"fmt"
	"runtime/pprof"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-ipvs/kube-ipvs/controller"
)

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

func ms64(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

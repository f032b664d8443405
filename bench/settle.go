package bench

import (
	"context"
	"fmt"
	"maps"
	"runtime"
	"time"

	"github.com/kube-ipvs/kube-ipvs/controller"
	"github.com/kube-ipvs/kube-ipvs/metrics"
)

// pollInterval is how often the kernel is read while a single change is awaited: each read
// is one netlink request, cheap next to the change itself.
const pollInterval = 2 * time.Millisecond

// waitKernel polls cond every interval until it holds, fails, or the run's timeout passes.
func (r *runner) waitKernel(cond func() (bool, error), interval time.Duration) error {
	return Poll(r.ctx, r.o.Timeout, interval, cond)
}

// Poll calls cond every interval until it holds, ctx ends, or timeout passes (the error then
// carries cond's last error): the one wait of both benches (kube-ipvs' and kube-proxy's).
func Poll(ctx context.Context, timeout, interval time.Duration, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
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
			return fmt.Errorf("not there after %s (last error: %v)", timeout, lastErr)
		}
		if ctx.Err() != nil {
			return ctx.Err()
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
		if st2.TotalSyncs == st.TotalSyncs && maps.Equal(w, w2) {
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

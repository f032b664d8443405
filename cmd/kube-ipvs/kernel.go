package main

import (
	"errors"
	"net/netip"
	"time"

	"github.com/kube-ipvs/kube-ipvs/controller"
	"github.com/kube-ipvs/kube-ipvs/dummyif"
	"github.com/kube-ipvs/kube-ipvs/ipvs"
	"github.com/kube-ipvs/kube-ipvs/model"
)

// The adapters below connect the kernel reconcilers to the controller's interfaces, so the
// kernel packages stay independent of the controller and of each other.

type ipvsAdapter struct{ r *ipvs.Reconciler }

func newIPVS(drainTimeout time.Duration) (controller.IPVS, error) {
	k, err := ipvs.NewKernel()
	if err != nil {
		return nil, err
	}
	r := ipvs.NewReconciler(k)
	r.SetGracefulTermination(drainTimeout, nil)
	return ipvsAdapter{r}, nil
}

func (a ipvsAdapter) Apply(ch map[model.VSKey]*model.VirtualServer) controller.IPVSResult {
	return convert(a.r.Apply(ch))
}

func (a ipvsAdapter) Resync(desired map[model.VSKey]*model.VirtualServer, owned func(model.VSKey) bool) controller.IPVSResult {
	return convert(a.r.Resync(desired, owned))
}

func (a ipvsAdapter) Drain() controller.IPVSResult { return convert(a.r.Drain()) }
func (a ipvsAdapter) Draining() int                { return a.r.Draining() }
func (a ipvsAdapter) Writes() uint64               { return a.r.Writes() }

func convert(r ipvs.Result) controller.IPVSResult {
	out := controller.IPVSResult{Writes: r.Writes, Ops: r.Ops, Errors: wrapSchedErrs(r.Errors), Err: r.Err, FirstUDPReals: r.FirstUDPReals}
	for _, x := range r.RemovedUDP {
		out.RemovedUDP = append(out.RemovedUDP, controller.RealServerRef{VS: x.VS, RS: x.RS})
	}
	return out
}

// schedErr lets the controller recognise a missing scheduler without importing package ipvs.
type schedErr struct {
	*ipvs.SchedulerUnavailableError
}

func (e schedErr) UnavailableScheduler() string { return e.Scheduler }
func (e schedErr) Unwrap() error                { return e.SchedulerUnavailableError }

func wrapSchedErrs(errs map[model.VSKey]error) map[model.VSKey]error {
	for k, e := range errs {
		var su *ipvs.SchedulerUnavailableError
		if errors.As(e, &su) {
			errs[k] = schedErr{su}
		}
	}
	return errs
}

type addrAdapter struct{ r *dummyif.Reconciler }

func newAddresses(name string) controller.Addresses { return addrAdapter{dummyif.New(name)} }

func (a addrAdapter) EnsureLink() error { return a.r.EnsureLink() }

func (a addrAdapter) Apply(bind, unbind []netip.Addr) controller.AddrResult {
	return addrResult(a.r.Apply(bind, unbind))
}

func (a addrAdapter) Resync(desired map[netip.Addr]bool) controller.AddrResult {
	return addrResult(a.r.Resync(desired))
}

func addrResult(r dummyif.Result) controller.AddrResult {
	return controller.AddrResult{Writes: r.Writes, Added: r.Added, Removed: r.Removed, Errors: r.Errors, Err: r.Err}
}

func (a addrAdapter) Bound() map[netip.Addr]bool {
	m := map[netip.Addr]bool{}
	for _, x := range a.r.Addresses() {
		m[x] = true
	}
	return m
}

func (a addrAdapter) Writes() uint64 { return a.r.Writes() }

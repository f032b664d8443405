package adapters

import (
	"errors"
	"time"

	"github.com/kube-ipvs/kube-ipvs/controller"
	"github.com/kube-ipvs/kube-ipvs/ipvs"
	"github.com/kube-ipvs/kube-ipvs/model"
)

// IPVS is the IPVS reconciler as the controller uses it.
type IPVS struct{ r *ipvs.Reconciler }

var _ controller.IPVS = (*IPVS)(nil)

// NewIPVS opens the IPVS netlink interface of the current network namespace and returns a
// reconciler whose removed TCP real servers drain for at most drainTimeout.
func NewIPVS(drainTimeout time.Duration) (*IPVS, error) {
	k, err := ipvs.NewKernel()
	if err != nil {
		return nil, err
	}
	return NewIPVSWith(k, drainTimeout), nil
}

// NewIPVSWith is NewIPVS over a given Kernel (a fake one in tests).
//
// The reconciler shares the controller's virtual servers as its cache (ShareDesired): the
// controller builds a new VirtualServer for every change and never modifies one it passed.
func NewIPVSWith(k ipvs.Kernel, drainTimeout time.Duration) *IPVS {
	r := ipvs.NewReconciler(k)
	r.SetGracefulTermination(drainTimeout, nil)
	r.ShareDesired()
	return &IPVS{r}
}

// Reconciler returns the underlying reconciler.
func (a *IPVS) Reconciler() *ipvs.Reconciler { return a.r }

func (a *IPVS) Apply(ch map[model.VSKey]*model.VirtualServer) controller.IPVSResult {
	return convert(a.r.Apply(ch))
}

func (a *IPVS) Resync(desired map[model.VSKey]*model.VirtualServer, owned func(model.VSKey) bool) controller.IPVSResult {
	return convert(a.r.Resync(desired, owned))
}

func (a *IPVS) Drain() controller.IPVSResult { return convert(a.r.Drain()) }
func (a *IPVS) Draining() int                { return a.r.Draining() }
func (a *IPVS) Writes() uint64               { return a.r.Writes() }

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

package adapters

import (
	"net/netip"

	"github.com/kube-ipvs/kube-ipvs/controller"
	"github.com/kube-ipvs/kube-ipvs/dummyif"
)

// Addresses is the kube-ipvs0 address reconciler as the controller uses it.
type Addresses struct{ r *dummyif.Reconciler }

var _ controller.Addresses = (*Addresses)(nil)

// NewAddresses returns the reconciler of the dummy link of that name, over the kernel's
// netlink in the current network namespace.
func NewAddresses(name string) *Addresses { return &Addresses{dummyif.New(name)} }

// NewAddressesWith wraps a given reconciler (one over a fake netlink in tests).
func NewAddressesWith(r *dummyif.Reconciler) *Addresses { return &Addresses{r} }

func (a *Addresses) EnsureLink() error { return a.r.EnsureLink() }

func (a *Addresses) Apply(bind, unbind []netip.Addr) controller.AddrResult {
	return addrResult(a.r.Apply(bind, unbind))
}

func (a *Addresses) Resync(desired map[netip.Addr]bool, found func(map[netip.Addr]bool)) controller.AddrResult {
	return addrResult(a.r.ResyncNotify(desired, found))
}

func addrResult(r dummyif.Result) controller.AddrResult {
	return controller.AddrResult{Writes: r.Writes, Added: r.Added, Removed: r.Removed, Errors: r.Errors, Err: r.Err}
}

func (a *Addresses) Bound() map[netip.Addr]bool { return a.r.Bound() }

func (a *Addresses) Writes() uint64 { return a.r.Writes() }

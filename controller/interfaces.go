package controller

import (
	"net/netip"

	"github.com/kube-ipvs/kube-ipvs/model"
)

// IPVS is the IPVS reconciler as the controller uses it (package ipvs, behind an adapter).
type IPVS interface {
	// Apply makes the given keys match (nil value: delete), from the reconciler's cache.
	Apply(changes map[model.VSKey]*model.VirtualServer) (writes int, errs map[model.VSKey]error)
	// Resync dumps the kernel and repairs every owned virtual server. err is set when the
	// whole repair failed (e.g. the dump could not be trusted); errs per virtual server.
	Resync(desired map[model.VSKey]*model.VirtualServer, owned func(model.VSKey) bool) (writes int, errs map[model.VSKey]error, err error)
	// Writes is the cumulative number of kernel write calls.
	Writes() uint64
}

// Addresses is the kube-ipvs0 address reconciler (package dummyif, behind an adapter).
type Addresses interface {
	EnsureLink() error
	Apply(bind, unbind []netip.Addr) (writes int, errs map[netip.Addr]error)
	Resync(desired map[netip.Addr]bool) (writes int, errs map[netip.Addr]error, err error)
	// Bound returns the addresses the link has, as last seen or set.
	Bound() map[netip.Addr]bool
	Writes() uint64
}

// SchedulerUnavailable is implemented by errors that mean the kernel has no such scheduler.
type SchedulerUnavailable interface {
	error
	UnavailableScheduler() string
}

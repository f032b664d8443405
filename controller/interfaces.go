package controller

import (
	"net/netip"

	"github.com/kube-ipvs/kube-ipvs/model"
)

// IPVSResult reports one IPVS operation.
type IPVSResult struct {
	Writes int
	Ops    map[string]int        // writes by kind: add, update, delete
	Errors map[model.VSKey]error // per virtual server; the others were applied
	Err    error                 // the whole operation failed (e.g. an untrusted dump)
	// RemovedUDP are UDP real servers deleted: their conntrack entries must go.
	RemovedUDP []RealServerRef
	// FirstUDPReals are UDP virtual servers that got their first real server.
	FirstUDPReals []model.VSKey
}

// RealServerRef names one real server of one virtual server.
type RealServerRef struct {
	VS model.VSKey
	RS model.RSKey
}

// IPVS is the IPVS reconciler as the controller uses it (package ipvs, behind an adapter).
type IPVS interface {
	// Apply makes the given keys match (nil value: delete), from the reconciler's cache.
	Apply(changes map[model.VSKey]*model.VirtualServer) IPVSResult
	// Resync dumps the kernel and repairs every owned virtual server.
	Resync(desired map[model.VSKey]*model.VirtualServer, owned func(model.VSKey) bool) IPVSResult
	// Drain deletes draining real servers whose connections ended or whose time is up.
	Drain() IPVSResult
	// Draining is the number of real servers draining.
	Draining() int
	// Writes is the cumulative number of kernel write calls.
	Writes() uint64
}

// FirewallFailureListener is implemented by an IPVS reconciler that must hear when an ipset
// or iptables step failed (iptables mode's stand-in, whose conntrack clearing only holds
// once the rules it reported for are in place: the repair that follows a failure must
// clear again).
type FirewallFailureListener interface {
	FirewallFailed()
}

// Conntrack deletes connection-tracking entries (package conntrack).
type Conntrack interface {
	ClearRealServer(vs model.VSKey, rs model.RSKey) (uint, error)
	ClearVirtualServer(vs model.VSKey) (uint, error)
}

// AddrResult reports one address operation.
type AddrResult struct {
	Writes, Added, Removed int
	Errors                 map[netip.Addr]error
	Err                    error
}

// Addresses is the kube-ipvs0 address reconciler (package dummyif, behind an adapter).
type Addresses interface {
	EnsureLink() error
	Apply(bind, unbind []netip.Addr) AddrResult
	// Resync makes the link hold exactly desired. It calls found once, before writing,
	// with the addresses the link had (nil if they could not be listed): the IPVS repair,
	// which runs meanwhile, owns the virtual servers on them.
	Resync(desired map[netip.Addr]bool, found func(map[netip.Addr]bool)) AddrResult
	// Bound returns the addresses the link has, as last seen or set.
	Bound() map[netip.Addr]bool
	Writes() uint64
}

// SchedulerUnavailable is implemented by errors that mean the kernel has no such scheduler.
type SchedulerUnavailable interface {
	error
	UnavailableScheduler() string
}

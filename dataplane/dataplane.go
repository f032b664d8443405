// Package dataplane is the seam between the controller and the kernel: the one interface
// the controller drives, implemented once per proxy mode (package dataplane/ipvsmode for
// IPVS, package iptproxy for the iptables fallback), and the plain values that cross it.
//
// The controller owns the desired state and resolves which Service owns each virtual
// server before it calls a Dataplane, so an implementation never decides between Services
// and never reads Kubernetes objects: everything it needs is in model.ServiceState. An
// implementation owns the write order inside its mode (set entries and rules before
// addresses, addresses before virtual servers, removals in reverse), its caches of what it
// applied, and its kernel errors, which it returns per key so that the controller retries
// exactly what failed.
package dataplane

import (
	"context"
	"net/netip"
	"time"

	"github.com/kube-ipvs/kube-ipvs/model"
)

// Dataplane is one proxy mode's kernel state. The controller calls it from one goroutine
// (but WatchDrift, which runs on its own). Every mode implements every method: one whose
// kernel has no such part says what it does instead (package iptproxy: a repair in one step,
// no drift heard, no weights).
type Dataplane interface {
	// Apply makes one sync's change from the implementation's caches, without reading the
	// kernel: a change with nothing in it writes nothing.
	Apply(Change) Result
	// Tick does the mode's periodic work between syncs (ending the drains of removed real
	// servers) and says how long until it wants to run again (0: nothing is pending).
	Tick() (Result, time.Duration)

	// A repair compares the whole desired state with the kernel and writes what drifted,
	// and only that: a repair of a kernel that matches writes nothing. Every repair is
	// BeginRepair, then RepairStep until it says done. A periodic repair is cut into
	// bounded steps: the controller applies changes between them, so that no change waits
	// for a whole repair, and a change applied between two steps is never reverted by a
	// later one. A repair asked to be whole (Live.Whole: the first repair, which adopts
	// what the kernel already holds right, and every repair with --repair-step=0) is one
	// step as large as everything: the first RepairStep, whatever its budget, finishes what
	// BeginRepair began and is done (the controller applies nothing in between, so the
	// parts may run side by side). So is every repair of a mode whose repair does not come
	// in steps (its BeginRepair may do it all).
	//
	// BeginRepair starts a repair: the work that is not cut into steps, and the listing the
	// steps work through.
	BeginRepair(Live) Result
	// RepairStep checks and repairs up to budget more virtual servers against live.
	RepairStep(live Live, budget int) (res Result, done bool)

	// A mode may hear of some of the kernel's drift as it happens (netlink notifications
	// about kube-ipvs0, say), instead of finding it in the next repair. One that hears none
	// returns from WatchDrift at once, says it is Watching, and never has drift to repair.

	// WatchDrift runs until ctx ends, calling drifted (from its own goroutine) whenever
	// drift waits for RepairDrift.
	WatchDrift(ctx context.Context, drifted func())
	// RepairDrift repairs the drift heard so far, against live; the sync goroutine calls it.
	RepairDrift(Live) Result
	// Watching reports whether the notifications are live (or the mode has none to wait
	// for): a listing made while they are is followed by them, and no repair cycle need
	// list again.
	Watching() bool

	// RealWeights reads the kernel's real servers and weights of those virtual servers; one
	// the kernel lacks is left out, and a mode whose kernel weighs no real servers returns
	// none. After a restart the controller reads the weights of the health-checked
	// Services' virtual servers once, so that an endpoint a check had taken out stays out
	// until a check says otherwise, instead of getting weight 1 back before the first
	// verdict.
	RealWeights(keys []model.VSKey) (map[model.VSKey]map[model.RSKey]uint32, error)
}

// Change is what one sync changes, after ownership was resolved.
type Change struct {
	// Services are the changed Services' resolved desired states (nil: gone, or no longer
	// the proxy's): the per-Service parts of a mode (set entries, the fallback's rules)
	// follow them. Virtual servers another Service won are not in them.
	Services map[model.ServiceName]*model.ServiceState
	// VSes are the virtual servers to create or update, or (nil) to delete.
	VSes map[model.VSKey]*model.VirtualServer
	// Bind and Unbind are the Service addresses that appear and vanish on the node.
	Bind, Unbind []netip.Addr
}

// Snapshot is the whole desired state, for a repair of everything at once
// (Live.Snapshot). Its maps are read-only.
type Snapshot struct {
	Services map[model.ServiceName]*model.ServiceState
	VSes     map[model.VSKey]*model.VirtualServer
	Binds    map[netip.Addr]bool
	// NodeIPs are the addresses with NodePort virtual servers (they also shape the
	// source-range rules: the node reaches a load balancer it holds from them).
	NodeIPs []netip.Addr
	// ServiceCIDRs are the cluster's Service CIDRs (masked, unmapped, any families):
	// new connections to an address in them that no Service holds are refused. The
	// controller repairs when they change, so only a repair carries them.
	ServiceCIDRs []netip.Prefix
}

// Result reports one call. Errors per key are retried by the controller (from the desired
// state as it is then); Err means a step failed as a whole and a repair must follow.
type Result struct {
	Writes   Writes
	Ops      map[Op]int // kernel writes by subsystem and operation, for metrics
	Failures map[string]int
	FailedVS map[model.VSKey]error
	FailedIP map[netip.Addr]error
	Err      error
	// SetEntries is the number of ipset entries desired after the call (IPVS mode).
	SetEntries int
	// Phases is where a repair's time went.
	Phases Phases
	// Waiting, from RepairStep: the step did nothing but find that the repair waits for
	// work running in the background (a listing); the caller may pause before the next
	// step (see StepPause). Not merged.
	Waiting bool
	// Listing, from the RepairStep that began a repair's check of the IPVS table: whether
	// the check lists the whole table (see ipvs/listing.go), for the repair's log line.
	Listing *TableListing
}

// TableListing says whether a repair lists the whole IPVS table, which only a listing
// shows strays in, and how long its last listing kept the kernel busy.
type TableListing struct {
	Listed   bool          // this repair lists the table
	LastTook time.Duration // the kernel's time on the last listing before this repair's
	Next     time.Time     // when a repair lists it next, if this one does not
}

// Writes counts kernel writes by part, for the sync log line and the controller's Stats.
type Writes struct {
	IPVS, Addresses, SetEntries, Restores int
}

// Op is one kind of kernel write: a subsystem and an operation (the labels of the
// netlink_writes_total metric).
type Op struct{ Subsystem, Name string }

// Subsystems and operations of Op.
const (
	SubsystemIPVS     = "ipvs"
	SubsystemAddress  = "address"
	SubsystemIPSet    = "ipset"
	SubsystemIPTables = "iptables"

	OpAdd    = "add"
	OpUpdate = "update"
	OpDelete = "delete"
)

// Phases are the durations of a repair's steps. Addresses and IPVS may run at the same
// time, so the repair took about Firewall + the longer of the two.
type Phases struct {
	Firewall, Addresses, IPVS time.Duration
}

// SchedulerUnavailable is implemented by errors that mean the kernel has no module for the
// scheduler a virtual server asked for.
type SchedulerUnavailable interface {
	error
	UnavailableScheduler() string
}

// AddOp counts n writes of one kind.
func (r *Result) AddOp(subsystem, op string, n int) {
	if n == 0 {
		return
	}
	if r.Ops == nil {
		r.Ops = map[Op]int{}
	}
	r.Ops[Op{subsystem, op}] += n
}

// AddFailures counts n failed kernel calls of a subsystem.
func (r *Result) AddFailures(subsystem string, n int) {
	if n == 0 {
		return
	}
	if r.Failures == nil {
		r.Failures = map[string]int{}
	}
	r.Failures[subsystem] += n
}

// FailVS records a failed virtual server.
func (r *Result) FailVS(k model.VSKey, err error) {
	if r.FailedVS == nil {
		r.FailedVS = map[model.VSKey]error{}
	}
	r.FailedVS[k] = err
}

// FailIP records a failed address.
func (r *Result) FailIP(a netip.Addr, err error) {
	if r.FailedIP == nil {
		r.FailedIP = map[netip.Addr]error{}
	}
	r.FailedIP[a] = err
}

// Merge adds o into r: counts add up, per-key failures join, errors join.
func (r *Result) Merge(o Result) {
	r.Writes.IPVS += o.Writes.IPVS
	r.Writes.Addresses += o.Writes.Addresses
	r.Writes.SetEntries += o.Writes.SetEntries
	r.Writes.Restores += o.Writes.Restores
	for k, n := range o.Ops {
		r.AddOp(k.Subsystem, k.Name, n)
	}
	for s, n := range o.Failures {
		r.AddFailures(s, n)
	}
	for k, e := range o.FailedVS {
		r.FailVS(k, e)
	}
	for a, e := range o.FailedIP {
		r.FailIP(a, e)
	}
	r.Err = joinErr(r.Err, o.Err)
	if o.SetEntries != 0 {
		r.SetEntries = o.SetEntries
	}
	r.Phases.Firewall += o.Phases.Firewall
	r.Phases.Addresses += o.Phases.Addresses
	r.Phases.IPVS += o.Phases.IPVS
	if o.Listing != nil {
		r.Listing = o.Listing
	}
}

// Failed is the number of failed keys, plus one if a step failed as a whole.
func (r Result) Failed() int {
	n := len(r.FailedVS) + len(r.FailedIP)
	if r.Err != nil {
		n++
	}
	return n
}

// StepTime bounds one step of a stepped repair, whatever its budget: a change waits for one
// step at most, and under emulation or load a step of RepairStep reads can take seconds.
const StepTime = 10 * time.Millisecond

// StepPause is how long the controller waits after a RepairStep that was only Waiting
// before it steps again (a change ends the pause at once): the background work is polled,
// not spun on, and the pause does not count as the repair's busy time.
const StepPause = 10 * time.Millisecond

// Package ipvs makes the kernel's IPVS table match the desired virtual servers.
//
// The Reconciler keeps a cached view of what it applied, so an incremental Apply costs kernel
// calls only for what differs (none when nothing does), and a Check repairs what drifted,
// in steps or (BeginWholeCheck) in one. Invariants:
//   - A spec change (scheduler, flags, timeout) is an in-place UpdateService: a virtual server
//     is never deleted and re-created for it, so established connections survive.
//   - Within one Apply, all creates and updates come before any delete: mid-Apply a virtual
//     server holds the union of its old and new real servers, never fewer.
//   - After a failed kernel call the cache entry of that virtual server is re-read from the
//     kernel, so the next Apply of the same desired state retries exactly what is still wrong.
//   - Virtual servers the caller does not own are never written by a repair.
package ipvs

import (
	"fmt"
	"net/netip"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kube-ipvs/kube-ipvs/model"
)

// Result reports one Apply, or one step of a repair.
type Result struct {
	// Writes is how many kernel write calls were made (successful or not), and Ops the same
	// by kind: "add", "update", "delete".
	Writes int
	Ops    map[string]int
	// Errors holds, per virtual server, what went wrong with it. Other virtual servers were
	// still applied.
	Errors map[model.VSKey]error
	// Err is set when the operation as a whole failed before writing anything, such as a
	// repair whose kernel dump failed or could not be trusted.
	Err error
	// RemovedUDP lists UDP real servers that were deleted: their conntrack entries should go
	// too, or clients keep sending to a dead backend.
	RemovedUDP []RealServerRef
	// FirstUDPReals lists UDP virtual servers that went from no real server to some: stale
	// conntrack entries for their address (from when packets had nowhere to go) should go.
	FirstUDPReals []model.VSKey
}

// RealServerRef names one real server of one virtual server.
type RealServerRef struct {
	VS model.VSKey
	RS model.RSKey
}

// Reconciler applies desired virtual servers to a Kernel. It is safe for concurrent use;
// calls are serialized.
type Reconciler struct {
	mu      sync.Mutex
	k       Kernel
	applied map[model.VSKey]*model.VirtualServer // what the kernel has, as far as we know
	writes  atomic.Uint64

	// Graceful termination. A TCP real server that is no longer wanted first goes to weight
	// 0 (no new connections) and is deleted when its connections reach 0 or its deadline
	// passes. The state is rebuilt from the kernel by a repair (a weight-0 real server that is
	// not wanted is draining), so it survives a restart.
	drainTimeout time.Duration
	now          func() time.Time
	draining     map[model.VSKey]map[model.RSKey]time.Time // deadline per draining real server
	wantSpec     map[model.VSKey]model.VSSpec              // the desired spec, before drain adjustments

	// While apply runs, writes are queued (batching) and pending holds them in order, whose
	// outcomes arrive at the flush.
	batching bool
	pending  []pendingRun

	// With share, a virtual server the kernel holds exactly as desired is cached as the
	// caller's own object rather than a copy (shared marks those): see ShareDesired.
	share  bool
	shared map[model.VSKey]bool

	// handover, when set, is a predecessor's handover for the next dump (see handover.go).
	handover map[model.VSKey]*model.VirtualServer
	// handoverRead is how many virtual servers the last dump with a handover read whole.
	handoverRead int

	// Lister, if set, is a second handle on the same IPVS table (its own socket), through
	// which a stepped Check lists the virtual servers in the background while Apply goes
	// on through the first. Set it before the first call.
	Lister ServiceLister

	// gen counts kernel writes; touched holds, per virtual server, the generation of the
	// last write to it, so that a stepped Check knows which virtual servers changed since
	// it listed the table.
	gen     uint64
	touched map[model.VSKey]uint64

	// listingAt is when the last listing of the whole table ended, and listingTook how long
	// it took: when the next check lists the table (see listing.go).
	listingAt   time.Time
	listingTook time.Duration
}

// ShareDesired lets the reconciler keep the virtual servers given to Apply and a repair as its
// cache of the kernel, instead of copies, for those the kernel ends up holding exactly so;
// it copies one before it records a change to it. The caller promises never to change a
// VirtualServer, or its Reals, after passing it. At 50,000 Services the cache would
// otherwise hold a second copy of over half a million real servers.
func (r *Reconciler) ShareDesired() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.share = true
}

// own returns the cached virtual server of key, first replacing it by a copy if it is the
// caller's (shared): call it before changing the cache.
func (r *Reconciler) own(key model.VSKey) *model.VirtualServer {
	if r.shared[key] {
		r.applied[key] = clone(r.applied[key])
		delete(r.shared, key)
	}
	return r.applied[key]
}

// forget drops the cache of key.
func (r *Reconciler) forget(key model.VSKey) {
	delete(r.applied, key)
	delete(r.shared, key)
}

// NewReconciler returns a Reconciler with an empty cache: repair whole first to adopt what the
// kernel already has. Without SetGracefulTermination, removed real servers are deleted at once.
func NewReconciler(k Kernel) *Reconciler {
	return &Reconciler{k: k, applied: map[model.VSKey]*model.VirtualServer{}, now: time.Now,
		draining: map[model.VSKey]map[model.RSKey]time.Time{}, wantSpec: map[model.VSKey]model.VSSpec{},
		shared: map[model.VSKey]bool{}, touched: map[model.VSKey]uint64{}, handoverRead: -1}
}

// Writes returns the number of kernel write calls made so far.
func (r *Reconciler) Writes() uint64 { return r.writes.Load() }

// Applied returns a copy of the cached state of one virtual server.
func (r *Reconciler) Applied(key model.VSKey) (*model.VirtualServer, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	vs, ok := r.applied[key]
	if !ok {
		return nil, false
	}
	return clone(vs), true
}

// Apply makes the kernel match changes, for those keys only: a nil value deletes the virtual
// server, any other value is its complete desired state. It reads nothing from the kernel
// unless a call fails, so applying what is already applied makes no kernel call at all.
func (r *Reconciler) Apply(changes map[model.VSKey]*model.VirtualServer) Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.apply(changes)
}

// validate rejects what the kernel could not hold or would hold under another key.
func validate(key model.VSKey, vs *model.VirtualServer) error {
	if vs.Key != key {
		return fmt.Errorf("virtual server %s is filed under key %s", vs.Key, key)
	}
	if !plainAddr(key.Addr) {
		return fmt.Errorf("virtual server %s: address must be plain IPv4 or IPv6", key)
	}
	for rs := range vs.Reals {
		if !plainAddr(rs.Addr) || rs.Addr.Is4() != key.Addr.Is4() {
			return fmt.Errorf("virtual server %s: real server %s must be a plain address of the same family", key, rs)
		}
	}
	return nil
}

func plainAddr(a netip.Addr) bool {
	return a.IsValid() && !a.Is4In6() && a.Zone() == ""
}

// normalize returns a deep copy keeping only the flags we manage.
func normalize(vs *model.VirtualServer) *model.VirtualServer {
	c := clone(vs)
	c.Spec.Flags &= model.FlagsWeManage
	return c
}

func clone(vs *model.VirtualServer) *model.VirtualServer {
	c := &model.VirtualServer{Key: vs.Key, Spec: vs.Spec, Reals: make(map[model.RSKey]uint32, len(vs.Reals))}
	for k, w := range vs.Reals {
		c.Reals[k] = w
	}
	return c
}

func sortedReals(m map[model.RSKey]uint32) []model.RSKey {
	keys := make([]model.RSKey, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return model.RSKeyLess(keys[i], keys[j]) })
	return keys
}

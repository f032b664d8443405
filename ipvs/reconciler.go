// Package ipvs makes the kernel's IPVS table match the desired virtual servers.
//
// The Reconciler keeps a cached view of what it applied, so an incremental Apply costs kernel
// calls only for what differs (none when nothing does), and Resync repairs everything from a
// kernel dump. Invariants:
//   - A spec change (scheduler, flags, timeout) is an in-place UpdateService: a virtual server
//     is never deleted and re-created for it, so established connections survive.
//   - Within one Apply, all creates and updates come before any delete: mid-Apply a virtual
//     server holds the union of its old and new real servers, never fewer.
//   - After a failed kernel call the cache entry of that virtual server is re-read from the
//     kernel, so the next Apply of the same desired state retries exactly what is still wrong.
//   - Virtual servers the caller does not own are never written by Resync.
package ipvs

import (
	"errors"
	"fmt"
	"net/netip"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kube-ipvs/kube-ipvs/model"
)

// Result reports one Apply or Resync.
type Result struct {
	// Writes is how many kernel write calls were made (successful or not), and Ops the same
	// by kind: "add", "update", "delete".
	Writes int
	Ops    map[string]int
	// Errors holds, per virtual server, what went wrong with it. Other virtual servers were
	// still applied.
	Errors map[model.VSKey]error
	// Err is set when the operation as a whole failed before writing anything, such as a
	// Resync whose kernel dump failed or could not be trusted.
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
	// passes. The state is rebuilt from the kernel by Resync (a weight-0 real server that is
	// not wanted is draining), so it survives a restart.
	drainTimeout time.Duration
	now          func() time.Time
	draining     map[model.VSKey]map[model.RSKey]time.Time // deadline per draining real server
	wantSpec     map[model.VSKey]model.VSSpec              // the desired spec, before drain adjustments

	// While apply runs over a Kernel that batches, writes are queued: batch is that kernel
	// and pending the queued writes in order, whose outcomes arrive at the flush.
	batch   batcher
	pending []pendingRun

	// With share, a virtual server the kernel holds exactly as desired is cached as the
	// caller's own object rather than a copy (shared marks those): see ShareDesired.
	share  bool
	shared map[model.VSKey]bool
}

// ShareDesired lets the reconciler keep the virtual servers given to Apply and Resync as its
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

// batcher is implemented by a Kernel that can queue writes and send many per system call.
// Between startBatch and flushBatch, a write method either fails at once (nothing queued) or
// returns nil and is queued; flushBatch sends the queue, calls failed for each queued write
// that failed (by its index among the queued, in order) and returns how many were queued.
type batcher interface {
	startBatch()
	flushBatch(failed func(i int, err error)) int
}

// pendingRun is n consecutive queued writes of one step, and whether "not found" counts as
// success for them (deletes of what is already gone). Runs, not one entry per write: a
// cold start queues over half a million writes.
type pendingRun struct {
	s          *step
	n          int
	goneIsDone bool
}

// NewReconciler returns a Reconciler with an empty cache: call Resync first to adopt what the
// kernel already has. Without SetGracefulTermination, removed real servers are deleted at once.
func NewReconciler(k Kernel) *Reconciler {
	return &Reconciler{k: k, applied: map[model.VSKey]*model.VirtualServer{}, now: time.Now,
		draining: map[model.VSKey]map[model.RSKey]time.Time{}, wantSpec: map[model.VSKey]model.VSSpec{},
		shared: map[model.VSKey]bool{}}
}

// SetGracefulTermination makes removed TCP real servers drain at weight 0 for at most
// timeout (0: delete at once). now is the clock (nil: time.Now).
func (r *Reconciler) SetGracefulTermination(timeout time.Duration, now func() time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.drainTimeout = timeout
	if now != nil {
		r.now = now
	}
}

// Draining returns how many real servers are draining.
func (r *Reconciler) Draining() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, m := range r.draining {
		n += len(m)
	}
	return n
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

// Resync dumps the kernel, replaces the cache with what it found, then makes every desired
// virtual server right and deletes every other virtual server for which owned returns true
// (a nil owned owns nothing). Virtual servers that are neither desired nor owned are left
// alone. When the kernel already matches, it writes nothing. If the dump fails, nothing is
// written, the cache is unchanged and Result.Err says why.
func (r *Reconciler) Resync(desired map[model.VSKey]*model.VirtualServer, owned func(model.VSKey) bool) Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	applied, shared, err := r.dump(desired)
	if err != nil {
		return Result{Err: fmt.Errorf("resync: %w", err)}
	}
	r.applied, r.shared = applied, shared
	changes := make(map[model.VSKey]*model.VirtualServer, len(desired))
	for key, vs := range desired {
		if vs == nil {
			continue
		}
		if shared[key] && applied[key] == vs && len(r.draining[key]) == 0 {
			// The kernel holds exactly this (see dump): nothing to do but remember the spec.
			r.wantSpec[key] = vs.Spec
			continue
		}
		changes[key] = vs
	}
	for key := range r.applied {
		if _, want := desired[key]; (!want || desired[key] == nil) && owned != nil && owned(key) {
			changes[key] = nil
		}
	}
	return r.apply(changes)
}

// visitor is implemented by a Kernel that can hand over the virtual servers one at a time as
// it lists them, in an object it reuses.
type visitor interface {
	// EachVirtualServer lists as ListVirtualServers does, calling fn with each virtual server;
	// vs and its Reals are valid only during the call. It calls start before each attempt
	// (a listing found interrupted is taken again): what fn saw before is to be forgotten.
	EachVirtualServer(start func(), fn func(vs *model.VirtualServer)) error
}

// dump reads the kernel's virtual servers as the new cache. Over a visitor kernel, one that
// matches its desired state exactly is cached as the desired object itself when sharing
// (see ShareDesired), and copied otherwise: a full resync of a large, healthy table then
// builds nothing.
func (r *Reconciler) dump(desired map[model.VSKey]*model.VirtualServer) (map[model.VSKey]*model.VirtualServer, map[model.VSKey]bool, error) {
	shared := map[model.VSKey]bool{}
	v, ok := r.k.(visitor)
	if !ok {
		vses, err := r.k.ListVirtualServers()
		if err != nil {
			return nil, nil, err
		}
		applied := make(map[model.VSKey]*model.VirtualServer, len(vses))
		for _, vs := range vses {
			applied[vs.Key] = normalize(vs)
		}
		return applied, shared, nil
	}
	var applied map[model.VSKey]*model.VirtualServer
	start := func() {
		applied = make(map[model.VSKey]*model.VirtualServer, len(r.applied))
		clear(shared)
	}
	err := v.EachVirtualServer(start, func(vs *model.VirtualServer) {
		want := desired[vs.Key]
		if r.share && want != nil && want.Spec.Flags&^model.FlagsWeManage == 0 &&
			vs.Spec.Flags&^model.FlagsWeManage == 0 && vs.Equal(want) {
			applied[vs.Key] = want
			shared[vs.Key] = true
			return
		}
		applied[vs.Key] = normalize(vs)
	})
	if err != nil {
		return nil, nil, err
	}
	return applied, shared, nil
}

// step is the per-virtual-server bookkeeping of one apply.
type step struct {
	key   model.VSKey
	want  *model.VirtualServer // nil: delete
	given *model.VirtualServer // the caller's object (want, unless its flags needed masking)
	skip  bool                 // invalid, or its service could not be created: no more calls
	errs  []error
	wrote bool
}

func (r *Reconciler) apply(changes map[model.VSKey]*model.VirtualServer) Result {
	res := Result{}
	steps := make([]*step, 0, len(changes))
	for key, want := range changes {
		s := &step{key: key}
		if want != nil {
			if err := validate(key, want); err != nil {
				s.errs, s.skip = append(s.errs, err), true
			} else {
				s.given, s.want = want, want
				if want.Spec.Flags&^model.FlagsWeManage != 0 {
					s.want = normalize(want) // only read: no copy unless flags need masking
				}
			}
		}
		steps = append(steps, s)
	}
	sort.Slice(steps, func(i, j int) bool { return model.VSKeyLess(steps[i].key, steps[j].key) })

	// Over a batching kernel every write below is queued, in the same order as it would be
	// made one by one, and sent many per system call. The cache is updated as if each
	// succeeded; a step whose writes failed is re-read from the kernel afterwards, as in the
	// unbatched case, which puts the cache right.
	if b, ok := r.k.(batcher); ok {
		b.startBatch()
		r.batch = b
	}

	// 1. Create virtual servers, add real servers and change weights (including giving a
	// draining real server that is wanted again its weight back).
	for _, s := range steps {
		if s.want != nil && !s.skip {
			r.upsert(s, &res)
		}
	}
	// 2. Retire real servers that are no longer wanted (drain or delete), with the spec
	// updated in place first, so that sh and mh fall back before a weight goes to 0.
	for _, s := range steps {
		if s.want != nil && !s.skip {
			r.retireReals(s, &res)
		}
	}
	// 3. Delete virtual servers.
	for _, s := range steps {
		if s.want == nil && !s.skip {
			r.remove(s, &res)
		}
	}
	r.flush()

	for _, s := range steps {
		if len(s.errs) == 0 {
			continue
		}
		if res.Errors == nil {
			res.Errors = map[model.VSKey]error{}
		}
		res.Errors[s.key] = errors.Join(s.errs...)
		if s.wrote {
			r.refresh(s)
		}
	}
	if r.share {
		for _, s := range steps {
			r.shareIfSame(s)
		}
	}
	return res
}

// shareIfSame caches the caller's object for a virtual server that the kernel now holds
// exactly as desired, not draining.
func (r *Reconciler) shareIfSame(s *step) {
	if len(s.errs) > 0 || s.given == nil || s.given != s.want || r.shared[s.key] || len(r.draining[s.key]) > 0 {
		return
	}
	if have := r.applied[s.key]; have != nil && have.Equal(s.given) {
		r.applied[s.key] = s.given
		r.shared[s.key] = true
	}
}

func (r *Reconciler) upsert(s *step, res *Result) {
	r.wantSpec[s.key] = s.want.Spec
	have := r.applied[s.key]
	if have != nil && len(r.draining[s.key]) == 0 && have.Equal(s.want) {
		return // nothing to write (and retireReals finds nothing to retire)
	}
	if have == nil {
		if !r.write(s, res, opAdd, r.k.NewService(s.key, s.want.Spec)) {
			s.skip = true // nothing to add real servers to
			return
		}
		if r.share && s.given == s.want {
			r.createShared(s, res)
			return
		}
		have = &model.VirtualServer{Key: s.key, Spec: s.want.Spec, Reals: map[model.RSKey]uint32{}}
		r.applied[s.key] = have
		delete(r.shared, s.key)
		delete(r.draining, s.key)
	} else {
		// A spec change is made in place, never by delete and re-create.
		r.fixSpec(s, res)
		have = r.applied[s.key]
	}
	hadReals := len(have.Reals) > 0
	for _, rs := range sortedReals(s.want.Reals) {
		w := s.want.Reals[rs]
		cur, ok := have.Reals[rs]
		switch {
		case !ok:
			if r.write(s, res, opAdd, r.k.NewDestination(s.key, rs, w)) {
				have = r.own(s.key)
				have.Reals[rs] = w
			}
		case cur != w:
			if r.write(s, res, opUpdate, r.k.UpdateDestination(s.key, rs, w)) {
				have = r.own(s.key)
				have.Reals[rs] = w
			}
		}
		if have.Reals[rs] == w {
			r.stopDraining(s.key, rs)
		}
	}
	if s.key.Proto == model.UDP && !hadReals && len(have.Reals) > 0 {
		res.FirstUDPReals = append(res.FirstUDPReals, s.key)
	}
}

// createShared adds every real server of a virtual server just created and caches the
// caller's object itself (shared) instead of building a copy real server by real server: a
// cold start at 50,000 Services would otherwise hold a second copy of every virtual server
// until the end of the apply. A write that failed, at once or at the batch's flush, makes
// apply re-read the virtual server from the kernel, which replaces the shared object (or
// forgets it), as for any failed step.
func (r *Reconciler) createShared(s *step, res *Result) {
	added := 0
	for _, rs := range sortedReals(s.want.Reals) {
		if r.write(s, res, opAdd, r.k.NewDestination(s.key, rs, s.want.Reals[rs])) {
			added++
		}
	}
	delete(r.draining, s.key)
	r.applied[s.key] = s.given
	r.shared[s.key] = true
	if s.key.Proto == model.UDP && added > 0 {
		res.FirstUDPReals = append(res.FirstUDPReals, s.key)
	}
}

// retireReals handles the real servers the kernel has but s no longer wants: TCP ones drain
// at weight 0 when graceful termination is on, the rest are deleted. A drain that starts on
// an sh or mh virtual server first sets the fallback flag (fixSpec), before any weight is 0.
func (r *Reconciler) retireReals(s *step, res *Result) {
	have := r.applied[s.key]
	if have == nil || (len(r.draining[s.key]) == 0 && have.Equal(s.want)) {
		return
	}
	var toDrain, toDelete []model.RSKey
	for _, rs := range sortedReals(have.Reals) {
		if _, ok := s.want.Reals[rs]; ok {
			continue
		}
		switch {
		case s.key.Proto != model.TCP || r.drainTimeout <= 0:
			toDelete = append(toDelete, rs)
		case have.Reals[rs] == 0:
			// Already at weight 0: draining, possibly since before a restart.
			r.startDraining(s.key, rs)
		default:
			toDrain = append(toDrain, rs)
		}
	}
	for _, rs := range toDrain {
		r.startDraining(s.key, rs)
	}
	r.fixSpec(s, res)
	for _, rs := range toDrain {
		if r.write(s, res, opUpdate, r.k.UpdateDestination(s.key, rs, 0)) {
			r.own(s.key).Reals[rs] = 0
		} else {
			r.stopDraining(s.key, rs)
		}
	}
	for _, rs := range toDelete {
		r.deleteReal(s, res, rs)
	}
}

// fixSpec updates the virtual server's spec in place when it differs from the effective one.
// If it fails (say the scheduler is missing), the real servers are still updated: endpoints
// must not wait for the spec.
func (r *Reconciler) fixSpec(s *step, res *Result) {
	have := r.applied[s.key]
	want := r.effectiveSpec(s.key)
	if have == nil || have.Spec == want {
		return
	}
	if r.write(s, res, opUpdate, r.k.UpdateService(s.key, want)) {
		r.own(s.key).Spec = want
	}
}

// effectiveSpec is the desired spec adjusted for draining: sh and mh pick a bucket's real
// server even at weight 0 unless their fallback flag is set, so while any real server drains
// the flag is forced on (kubernetes PR #138688), and the user's flags return afterwards.
func (r *Reconciler) effectiveSpec(key model.VSKey) model.VSSpec {
	spec := r.wantSpec[key]
	if len(r.draining[key]) > 0 && (spec.Scheduler == "sh" || spec.Scheduler == "mh") {
		spec.Flags |= model.FlagSchedFallbk
	}
	return spec
}

func (r *Reconciler) startDraining(vs model.VSKey, rs model.RSKey) {
	if r.draining[vs] == nil {
		r.draining[vs] = map[model.RSKey]time.Time{}
	}
	if _, ok := r.draining[vs][rs]; !ok {
		r.draining[vs][rs] = r.now().Add(r.drainTimeout)
	}
}

func (r *Reconciler) stopDraining(vs model.VSKey, rs model.RSKey) {
	if m := r.draining[vs]; m != nil {
		delete(m, rs)
		if len(m) == 0 {
			delete(r.draining, vs)
		}
	}
}

func (r *Reconciler) deleteReal(s *step, res *Result, rs model.RSKey) {
	err := r.k.DelDestination(s.key, rs)
	if errors.Is(err, ErrNotFound) {
		err = nil // already gone: that is what we wanted
	}
	if r.writeDelete(s, res, err) {
		delete(r.own(s.key).Reals, rs)
		r.stopDraining(s.key, rs)
		if s.key.Proto == model.UDP {
			res.RemovedUDP = append(res.RemovedUDP, RealServerRef{VS: s.key, RS: rs})
		}
	}
}

// Drain deletes draining real servers whose connections reached 0 or whose deadline passed,
// and restores the user's spec on virtual servers that finished draining. It reads only the
// virtual servers that drain (one request each), so its cost follows the number of draining
// virtual servers, not the cluster's size.
func (r *Reconciler) Drain() Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	res := Result{}
	now := r.now()
	keys := make([]model.VSKey, 0, len(r.draining))
	for k := range r.draining {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return model.VSKeyLess(keys[i], keys[j]) })
	for _, key := range keys {
		s := &step{key: key}
		have := r.applied[key]
		conns, err := r.k.Connections(key)
		if errors.Is(err, ErrNotFound) || have == nil {
			delete(r.draining, key)
			continue
		}
		if err != nil {
			s.errs = append(s.errs, err)
		} else {
			for _, rs := range sortedRealsByTime(r.draining[key]) {
				n, present := conns[rs]
				switch {
				case !present:
					delete(r.own(key).Reals, rs)
					r.stopDraining(key, rs)
				case n == 0 || !now.Before(r.draining[key][rs]):
					r.deleteReal(s, &res, rs)
				}
			}
			if _, still := r.draining[key]; !still {
				r.fixSpec(s, &res)
			}
		}
		if len(s.errs) > 0 {
			if res.Errors == nil {
				res.Errors = map[model.VSKey]error{}
			}
			res.Errors[key] = errors.Join(s.errs...)
		}
	}
	return res
}

func sortedRealsByTime(m map[model.RSKey]time.Time) []model.RSKey {
	keys := make([]model.RSKey, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return model.RSKeyLess(keys[i], keys[j]) })
	return keys
}

func (r *Reconciler) remove(s *step, res *Result) {
	if _, ok := r.applied[s.key]; !ok {
		return
	}
	err := r.k.DelService(s.key)
	if errors.Is(err, ErrNotFound) {
		err = nil
	}
	if r.writeDelete(s, res, err) {
		r.forget(s.key)
		delete(r.draining, s.key)
		delete(r.wantSpec, s.key)
	}
}

// Kinds of write, for Result.Ops.
const (
	opAdd    = "add"
	opUpdate = "update"
	opDelete = "delete"
)

// write accounts for one kernel write call of kind op that returned err; it reports success
// (for a queued write: that it was queued).
func (r *Reconciler) write(s *step, res *Result, op string, err error) bool {
	return r.account(s, res, op, err, false)
}

// writeDelete is write for a delete, whose "not found" answer counts as success.
func (r *Reconciler) writeDelete(s *step, res *Result, err error) bool {
	return r.account(s, res, opDelete, err, true)
}

func (r *Reconciler) account(s *step, res *Result, op string, err error, goneIsDone bool) bool {
	res.Writes++
	if res.Ops == nil {
		res.Ops = map[string]int{}
	}
	res.Ops[op]++
	r.writes.Add(1)
	s.wrote = true
	if err != nil {
		s.errs = append(s.errs, err)
		return false
	}
	if r.batch != nil {
		if n := len(r.pending); n > 0 && r.pending[n-1].s == s && r.pending[n-1].goneIsDone == goneIsDone {
			r.pending[n-1].n++
		} else {
			r.pending = append(r.pending, pendingRun{s: s, n: 1, goneIsDone: goneIsDone})
		}
	}
	return true
}

// flush ends a batch: it sends the queued writes and files each failure with its step.
func (r *Reconciler) flush() {
	if r.batch == nil {
		return
	}
	queued := 0
	for _, p := range r.pending {
		queued += p.n
	}
	run, start := 0, 0 // the run holding write index i starts at write start
	file := func(i int, err error) {
		for run < len(r.pending) && i >= start+r.pending[run].n {
			start += r.pending[run].n
			run++
		}
		if run == len(r.pending) {
			return
		}
		p := r.pending[run]
		if err != nil && !(p.goneIsDone && errors.Is(err, ErrNotFound)) {
			p.s.errs = append(p.s.errs, err)
		}
	}
	if n := r.batch.flushBatch(file); n != queued {
		// Cannot happen with a correct Kernel; if it does, nothing about this batch is known.
		for _, p := range r.pending {
			p.s.errs = append(p.s.errs, fmt.Errorf("the kernel accounted for %d writes of %d", n, queued))
		}
	}
	r.batch = nil
	r.pending = nil
}

// refresh re-reads one virtual server after a failed write, so the cache holds the kernel's
// truth again. If it cannot be read, it is dropped from the cache (the next Apply creates it,
// and a create that meets an existing one fails and refreshes again), except when it was
// being deleted: then it stays, so the next Apply retries the delete.
func (r *Reconciler) refresh(s *step) {
	vs, err := r.k.GetVirtualServer(s.key)
	switch {
	case err == nil:
		r.applied[s.key] = normalize(vs)
		delete(r.shared, s.key)
	case errors.Is(err, ErrNotFound) || s.want != nil:
		r.forget(s.key)
	}
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

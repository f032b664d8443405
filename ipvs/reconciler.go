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

	"github.com/kube-ipvs/kube-ipvs/model"
)

// Result reports one Apply or Resync.
type Result struct {
	// Writes is how many kernel write calls were made (successful or not).
	Writes int
	// Errors holds, per virtual server, what went wrong with it. Other virtual servers were
	// still applied.
	Errors map[model.VSKey]error
	// Err is set when the operation as a whole failed before writing anything, such as a
	// Resync whose kernel dump failed or could not be trusted.
	Err error
}

// Reconciler applies desired virtual servers to a Kernel. It is safe for concurrent use;
// calls are serialized.
type Reconciler struct {
	mu      sync.Mutex
	k       Kernel
	applied map[model.VSKey]*model.VirtualServer // what the kernel has, as far as we know
	writes  atomic.Uint64
}

// NewReconciler returns a Reconciler with an empty cache: call Resync first to adopt what the
// kernel already has.
func NewReconciler(k Kernel) *Reconciler {
	return &Reconciler{k: k, applied: map[model.VSKey]*model.VirtualServer{}}
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
	vses, err := r.k.ListVirtualServers()
	if err != nil {
		return Result{Err: fmt.Errorf("resync: %w", err)}
	}
	r.applied = make(map[model.VSKey]*model.VirtualServer, len(vses))
	for _, vs := range vses {
		r.applied[vs.Key] = normalize(vs)
	}
	changes := make(map[model.VSKey]*model.VirtualServer, len(desired))
	for key, vs := range desired {
		if vs != nil {
			changes[key] = vs
		}
	}
	for key := range r.applied {
		if _, want := changes[key]; !want && owned != nil && owned(key) {
			changes[key] = nil
		}
	}
	return r.apply(changes)
}

// step is the per-virtual-server bookkeeping of one apply.
type step struct {
	key   model.VSKey
	want  *model.VirtualServer // nil: delete
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
				s.want = normalize(want)
			}
		}
		steps = append(steps, s)
	}
	sort.Slice(steps, func(i, j int) bool { return model.VSKeyLess(steps[i].key, steps[j].key) })

	// 1. Create virtual servers, update specs, add real servers and change weights.
	for _, s := range steps {
		if s.want != nil && !s.skip {
			r.upsert(s, &res)
		}
	}
	// 2. Remove real servers that are no longer wanted.
	for _, s := range steps {
		if s.want != nil && !s.skip {
			r.removeStaleReals(s, &res)
		}
	}
	// 3. Delete virtual servers.
	for _, s := range steps {
		if s.want == nil && !s.skip {
			r.remove(s, &res)
		}
	}

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
	return res
}

func (r *Reconciler) upsert(s *step, res *Result) {
	have := r.applied[s.key]
	if have == nil {
		if !r.write(s, res, r.k.NewService(s.key, s.want.Spec)) {
			s.skip = true // nothing to add real servers to
			return
		}
		have = &model.VirtualServer{Key: s.key, Spec: s.want.Spec, Reals: map[model.RSKey]uint32{}}
		r.applied[s.key] = have
	} else if have.Spec != s.want.Spec {
		// In place, never delete and re-create. If it fails (say the scheduler is missing),
		// the real servers are still updated: endpoints must not wait for the spec.
		if r.write(s, res, r.k.UpdateService(s.key, s.want.Spec)) {
			have.Spec = s.want.Spec
		}
	}
	for _, rs := range sortedReals(s.want.Reals) {
		w := s.want.Reals[rs]
		cur, ok := have.Reals[rs]
		switch {
		case !ok:
			if r.write(s, res, r.k.NewDestination(s.key, rs, w)) {
				have.Reals[rs] = w
			}
		case cur != w:
			if r.write(s, res, r.k.UpdateDestination(s.key, rs, w)) {
				have.Reals[rs] = w
			}
		}
	}
}

func (r *Reconciler) removeStaleReals(s *step, res *Result) {
	have := r.applied[s.key]
	if have == nil {
		return
	}
	for _, rs := range sortedReals(have.Reals) {
		if _, ok := s.want.Reals[rs]; ok {
			continue
		}
		err := r.k.DelDestination(s.key, rs)
		if errors.Is(err, ErrNotFound) {
			err = nil // already gone: that is what we wanted
		}
		if r.write(s, res, err) {
			delete(have.Reals, rs)
		}
	}
}

func (r *Reconciler) remove(s *step, res *Result) {
	if _, ok := r.applied[s.key]; !ok {
		return
	}
	err := r.k.DelService(s.key)
	if errors.Is(err, ErrNotFound) {
		err = nil
	}
	if r.write(s, res, err) {
		delete(r.applied, s.key)
	}
}

// write accounts for one kernel write call that returned err; it reports success.
func (r *Reconciler) write(s *step, res *Result, err error) bool {
	res.Writes++
	r.writes.Add(1)
	s.wrote = true
	if err != nil {
		s.errs = append(s.errs, err)
		return false
	}
	return true
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
	case errors.Is(err, ErrNotFound) || s.want != nil:
		delete(r.applied, s.key)
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

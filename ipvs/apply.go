package ipvs

import (
	"errors"
	"sort"

	"github.com/kube-ipvs/kube-ipvs/model"
)

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

	// Every write below is queued, in the order it would be made one by one, and sent many
	// per system call. The cache is updated as if each succeeded; a step whose writes failed
	// is re-read from the kernel afterwards, which puts the cache right.
	r.k.StartBatch()
	r.batching = true

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
		if !r.noteWrite(s, res, opAdd, r.k.NewService(s.key, s.want.Spec)) {
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
			if r.noteWrite(s, res, opAdd, r.k.NewDestination(s.key, rs, w)) {
				have = r.own(s.key)
				have.Reals[rs] = w
			}
		case cur != w:
			if r.noteWrite(s, res, opUpdate, r.k.UpdateDestination(s.key, rs, w)) {
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
		if r.noteWrite(s, res, opAdd, r.k.NewDestination(s.key, rs, s.want.Reals[rs])) {
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
		if r.noteWrite(s, res, opUpdate, r.k.UpdateDestination(s.key, rs, 0)) {
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
	if r.noteWrite(s, res, opUpdate, r.k.UpdateService(s.key, want)) {
		r.own(s.key).Spec = want
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
	if r.noteDelete(s, res, err) {
		r.forget(s.key)
		delete(r.draining, s.key)
		delete(r.wantSpec, s.key)
	}
}

// refresh re-reads one virtual server after a failed write, so the cache holds the kernel's
// truth again. If it cannot be read, it is dropped from the cache (the next Apply creates it,
// and a create that meets an existing one fails and refreshes again), except when it was
// being deleted: then it stays, so the next Apply retries the delete.
func (r *Reconciler) refresh(s *step) {
	vs, err := ReadVirtualServer(r.k, s.key)
	switch {
	case err == nil:
		r.applied[s.key] = normalize(vs)
		delete(r.shared, s.key)
	case errors.Is(err, ErrNotFound) || s.want != nil:
		r.forget(s.key)
	}
}

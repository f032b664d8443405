package ipvs

import (
	"errors"
	"sort"
	"time"

	"github.com/kube-ipvs/kube-ipvs/model"
)

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
	if r.noteDelete(s, res, err) {
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

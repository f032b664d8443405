package ipvs

import (
	"errors"
	"fmt"
)

// pendingRun is n consecutive queued writes of one step, and whether "not found" counts as
// success for them (deletes of what is already gone). Runs, not one entry per write: a
// cold start queues over half a million writes.
type pendingRun struct {
	s          *step
	n          int
	goneIsDone bool
}

// Kinds of write, for Result.Ops.
const (
	opAdd    = "add"
	opUpdate = "update"
	opDelete = "delete"
)

// noteWrite accounts for one kernel write call of kind op that already returned err; it
// reports success (for a queued write, which has only been queued: that it was queued).
func (r *Reconciler) noteWrite(s *step, res *Result, op string, err error) bool {
	return r.account(s, res, op, err, false)
}

// noteDelete is noteWrite for a delete, whose "not found" answer counts as success.
func (r *Reconciler) noteDelete(s *step, res *Result, err error) bool {
	return r.account(s, res, opDelete, err, true)
}

func (r *Reconciler) account(s *step, res *Result, op string, err error, goneIsDone bool) bool {
	res.Writes++
	if res.Ops == nil {
		res.Ops = map[string]int{}
	}
	res.Ops[op]++
	r.writes.Add(1)
	r.gen++
	r.touched[s.key] = r.gen
	s.wrote = true
	if err != nil {
		s.errs = append(s.errs, err)
		return false
	}
	if r.batching {
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
	if !r.batching {
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
	if n := r.k.FlushBatch(file); n != queued {
		// Cannot happen with a correct Kernel; if it does, nothing about this batch is known.
		for _, p := range r.pending {
			p.s.errs = append(p.s.errs, fmt.Errorf("the kernel accounted for %d writes of %d", n, queued))
		}
	}
	r.batching = false
	r.pending = nil
}

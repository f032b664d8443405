package ipset

import (
	"errors"
	"fmt"
	"sort"

	"github.com/kube-ipvs/kube-ipvs/firewall"
)

// Apply adds (true) and deletes (false) entries of defined sets, from the cache: entries
// already as wanted cost nothing, so applying what is applied makes no kernel call. Within
// one Apply all additions come before all deletions. A set that would grow past its maximum
// is rebuilt at a larger size (see the package comment).
//
// Apply the additions of a sync before its IPVS changes and the deletions after (see
// firewall.Tracker). After errors, applying the same changes again retries exactly what is
// still missing.
func (r *Reconciler) Apply(changes firewall.Changes) Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	res := Result{}
	names := make([]firewall.SetName, 0, len(changes))
	for n := range changes {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool { return names[i] < names[j] })

	type work struct {
		d    firewall.SetDef
		dels []firewall.Packed
	}
	var todo []work
	for _, n := range names {
		d, ok := r.defs[n]
		s := r.sets[n]
		if !ok || s == nil {
			if len(changes[n]) > 0 {
				res.fail(n, fmt.Errorf("set %s is not known: Resync with its definition first", n))
			}
			continue
		}
		var adds, dels []firewall.Packed
		w := r.watch[n]
		for e, want := range changes[n] {
			if err := d.Check(e); err != nil {
				res.fail(n, err)
				continue
			}
			p := e.Pack()
			if w != nil {
				w.touch(p)
			}
			_, has := s.entries[p]
			switch {
			case want && !has:
				adds = append(adds, p)
			case !want && has:
				dels = append(dels, p)
			}
		}
		if d.SkbInfo {
			dels = remarked(s, adds, dels)
		}
		r.addOrRebuild(d, s, adds, &res)
		if len(dels) > 0 {
			todo = append(todo, work{d, dels})
		}
	}
	for _, w := range todo {
		r.deletions(w.d, w.dels, &res)
	}
	return res
}

// remarked drops from dels the entries that an addition gives another mark, and forgets
// them in the cache: the kernel keys an entry without its mark, so the addition (which, as
// ipset's -exist, overwrites an entry's extensions) replaces them, and deleting one after it
// would delete the new entry.
func remarked(s *set, adds, dels []firewall.Packed) []firewall.Packed {
	if len(adds) == 0 || len(dels) == 0 {
		return dels
	}
	added := make(map[firewall.Packed]bool, len(adds))
	for _, p := range adds {
		added[p.Unmarked()] = true
	}
	kept := dels[:0]
	for _, p := range dels {
		if added[p.Unmarked()] {
			delete(s.entries, p)
			continue
		}
		kept = append(kept, p)
	}
	return kept
}

// deletions deletes entries from a set (from its current cache entry, which a rebuild may
// have replaced). A set found missing is re-created with what remains.
func (r *Reconciler) deletions(d firewall.SetDef, dels []firewall.Packed, res *Result) {
	s := r.sets[d.Name]
	if s == nil || len(dels) == 0 {
		return
	}
	if err := r.batches(d.Name, s, dels, false, res); errors.Is(err, ErrSetNotFound) {
		final := make(map[firewall.Packed]struct{}, len(s.entries))
		for p := range s.entries {
			final[p] = struct{}{}
		}
		for _, p := range dels {
			delete(final, p)
		}
		r.rebuild(d, final, false, res)
	}
}

// addOrRebuild adds entries to a set, rebuilding it larger first when they would not fit,
// or when the kernel says it is full or gone.
func (r *Reconciler) addOrRebuild(d firewall.SetDef, s *set, adds []firewall.Packed, res *Result) {
	if len(adds) == 0 {
		return
	}
	final := func() map[firewall.Packed]struct{} {
		m := make(map[firewall.Packed]struct{}, len(s.entries)+len(adds))
		for p := range s.entries {
			m[p] = struct{}{}
		}
		for _, p := range adds {
			m[p] = struct{}{}
		}
		return m
	}
	if d.Type != firewall.BitmapPort && len(s.entries)+len(adds) > int(s.spec.MaxElem) {
		r.rebuild(d, final(), true, res)
		return
	}
	switch err := r.batches(d.Name, s, adds, true, res); {
	case err == nil:
	case errors.Is(err, ErrSetNotFound):
		r.rebuild(d, final(), false, res)
	case errors.Is(err, ErrSetFull) && d.Type != firewall.BitmapPort:
		r.rebuild(d, final(), true, res)
	default:
		res.fail(d.Name, err)
	}
}

// batches adds or deletes entries in batches and records successes in the cache. A batch
// that fails for another reason than a missing or full set is retried entry by entry, so
// the error names the entries. It returns the error that stopped it, if it stopped.
func (r *Reconciler) batches(n firewall.SetName, s *set, list []firewall.Packed, add bool, res *Result) error {
	if len(list) == 0 {
		return nil
	}
	sortPacked(list)
	op, verb := r.k.Del, "delete"
	if add {
		op, verb = r.k.Add, "add"
	}
	size := r.batchSize()
	buf := make([]firewall.Entry, 0, min(size, len(list)))
	for start := 0; start < len(list); start += size {
		b := list[start:min(start+size, len(list))]
		buf = unpack(buf[:0], b)
		err := r.noteWrite(res, op(n, buf))
		if err == nil {
			record(s, b, add)
			continue
		}
		if errors.Is(err, ErrSetNotFound) || (add && errors.Is(err, ErrSetFull)) {
			return err // the caller rebuilds the set
		}
		if len(b) == 1 {
			res.fail(n, err)
			continue
		}
		for i, e := range buf {
			if err := r.noteWrite(res, op(n, []firewall.Entry{e})); err != nil {
				res.fail(n, fmt.Errorf("%s %s: %w", verb, e, err))
				continue
			}
			record(s, b[i:i+1], add)
		}
	}
	return nil
}

func (r *Reconciler) batchSize() int {
	if r.BatchSize <= 0 {
		return DefaultBatchSize
	}
	return r.BatchSize
}

func unpack(dst []firewall.Entry, ps []firewall.Packed) []firewall.Entry {
	for _, p := range ps {
		dst = append(dst, p.Entry())
	}
	return dst
}

func record(s *set, ps []firewall.Packed, add bool) {
	for _, p := range ps {
		if add {
			s.entries[p] = struct{}{}
		} else {
			delete(s.entries, p)
		}
	}
}

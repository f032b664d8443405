package ipset

import (
	"errors"
	"fmt"

	"github.com/kube-ipvs/kube-ipvs/firewall"
)

// rebuild gives the set exactly the entries final, sized for them. When the set exists, a
// temporary twin is filled and swapped in; when it does not, it is created and filled (no
// rule can reference a set that does not exist).
func (r *Reconciler) rebuild(d firewall.SetDef, final map[firewall.Packed]struct{}, exists bool, res *Result) {
	spec := specFor(d, len(final))
	list := sortedPacked(final)
	r.headerGen++          // a background listing of the headers may predate what follows
	delete(r.sets, d.Name) // until we know again
	r.voidCheck(d.Name)    // a listing under way may predate the new content
	if !exists && !r.createFilled(d, spec, list, final, res) {
		return
	}
	r.swapInTwin(d, spec, list, final, res)
}

// createFilled creates the missing set d at spec and fills it with list (final, sorted). It
// returns true only when the set exists after all (created meanwhile): then the caller takes
// the swap path; otherwise the set is done, or its failure recorded in res.
func (r *Reconciler) createFilled(d firewall.SetDef, spec Spec, list []firewall.Packed, final map[firewall.Packed]struct{}, res *Result) (exists bool) {
	err := r.createSet(spec, false, res)
	switch {
	case errors.Is(err, ErrSetExists):
		return true
	case err != nil:
		res.fail(d.Name, fmt.Errorf("create set %s: %w", d.Name, err))
	default:
		if err := r.fill(d.Name, list, res); err != nil {
			res.fail(d.Name, err)
			r.relist(d, res)
		} else {
			r.sets[d.Name] = &set{spec: spec, entries: final}
		}
	}
	return false
}

// swapInTwin fills a temporary twin of the existing set d with list (final, sorted) and
// swaps it in with one kernel call, so no packet sees a half-filled set.
func (r *Reconciler) swapInTwin(d firewall.SetDef, spec Spec, list []firewall.Packed, final map[firewall.Packed]struct{}, res *Result) {
	tmpSpec := spec
	tmpSpec.Name = firewall.TempName(d.Name)
	if err := r.createSet(tmpSpec, true, res); err != nil {
		res.fail(d.Name, fmt.Errorf("rebuild %s: create %s: %w", d.Name, tmpSpec.Name, err))
		r.relist(d, res)
		return
	}
	if err := r.fill(tmpSpec.Name, list, res); err != nil {
		res.fail(d.Name, fmt.Errorf("rebuild %s: %w", d.Name, err))
		r.noteWrite(res, r.k.Destroy(tmpSpec.Name))
		r.relist(d, res)
		return
	}
	err := r.noteWrite(res, r.k.Swap(d.Name, tmpSpec.Name))
	if errors.Is(err, ErrTypeMismatch) {
		// The kernel swaps only sets of one type and family. The old set can go only if no
		// rule references it; then the filled twin cannot be renamed either, so the set is
		// created again and refilled (a brief window, acceptable only because nothing
		// matches against it).
		r.noteWrite(res, r.k.Destroy(tmpSpec.Name))
		if err := r.noteWrite(res, r.k.Destroy(d.Name)); err != nil {
			res.fail(d.Name, fmt.Errorf("set %s must change type or family, but cannot be destroyed (remove the iptables rules that use it first): %w", d.Name, err))
			return
		}
		r.rebuild(d, final, false, res)
		return
	}
	if err != nil {
		res.fail(d.Name, fmt.Errorf("rebuild %s: swap with %s: %w", d.Name, tmpSpec.Name, err))
		r.noteWrite(res, r.k.Destroy(tmpSpec.Name))
		r.relist(d, res)
		return
	}
	r.sets[d.Name] = &set{spec: spec, entries: final}
	// The twin now holds the old content.
	if err := r.noteWrite(res, r.k.Destroy(tmpSpec.Name)); err != nil && !errors.Is(err, ErrSetNotFound) {
		res.fail(d.Name, fmt.Errorf("destroy %s after the swap (Resync retries): %w", tmpSpec.Name, err))
	}
}

// createSet creates a set at s. A twin (s names a temporary twin) that already exists was
// left behind by an earlier rebuild: it is ours, so it is destroyed and created afresh.
func (r *Reconciler) createSet(s Spec, twin bool, res *Result) error {
	err := r.noteWrite(res, r.k.Create(s))
	if errors.Is(err, ErrSetExists) && twin {
		if err := r.noteWrite(res, r.k.Destroy(s.Name)); err != nil {
			return err
		}
		err = r.noteWrite(res, r.k.Create(s))
	}
	return err
}

// fill adds the sorted entries list to the new set name, in batches.
func (r *Reconciler) fill(name firewall.SetName, list []firewall.Packed, res *Result) error {
	size := r.batchSize()
	buf := make([]firewall.Entry, 0, min(size, len(list)))
	for start := 0; start < len(list); start += size {
		buf = unpack(buf[:0], list[start:min(start+size, len(list))])
		if err := r.noteWrite(res, r.k.Add(name, buf)); err != nil {
			return fmt.Errorf("fill %s: %w", name, err)
		}
	}
	return nil
}

// relist reads a set back after a failed rebuild, so the cache again says what the kernel
// has; if that fails too, the set stays unknown until the next Resync.
func (r *Reconciler) relist(d firewall.SetDef, res *Result) {
	headers, err := r.listHeaders()
	if err != nil {
		return
	}
	for _, h := range headers {
		if h.Name != d.Name {
			continue
		}
		listed, err := r.listEntries(d.Name)
		if err != nil {
			return
		}
		r.sets[d.Name] = &set{spec: h.Spec, entries: listed}
		r.voidCheck(d.Name)
		return
	}
}

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
	delete(r.sets, d.Name) // until we know again

	fill := func(name firewall.SetName) error {
		size := r.batchSize()
		buf := make([]firewall.Entry, 0, min(size, len(list)))
		for start := 0; start < len(list); start += size {
			buf = unpack(buf[:0], list[start:min(start+size, len(list))])
			if err := r.write(res, r.k.Add(name, buf)); err != nil {
				return fmt.Errorf("fill %s: %w", name, err)
			}
		}
		return nil
	}
	create := func(s Spec) error {
		err := r.write(res, r.k.Create(s))
		if errors.Is(err, ErrSetExists) && s.Name != d.Name {
			// A temporary twin left behind: it is ours, start afresh.
			if err := r.write(res, r.k.Destroy(s.Name)); err != nil {
				return err
			}
			err = r.write(res, r.k.Create(s))
		}
		return err
	}

	if !exists {
		err := create(spec)
		if errors.Is(err, ErrSetExists) {
			exists = true // created meanwhile: take the swap path
		} else if err != nil {
			res.fail(d.Name, fmt.Errorf("create set %s: %w", d.Name, err))
			return
		} else if err := fill(d.Name); err != nil {
			res.fail(d.Name, err)
			r.relist(d, res)
			return
		} else {
			r.sets[d.Name] = &set{spec: spec, entries: final}
			return
		}
	}

	tmpSpec := spec
	tmpSpec.Name = firewall.TempName(d.Name)
	if err := create(tmpSpec); err != nil {
		res.fail(d.Name, fmt.Errorf("rebuild %s: create %s: %w", d.Name, tmpSpec.Name, err))
		r.relist(d, res)
		return
	}
	if err := fill(tmpSpec.Name); err != nil {
		res.fail(d.Name, fmt.Errorf("rebuild %s: %w", d.Name, err))
		r.write(res, r.k.Destroy(tmpSpec.Name))
		r.relist(d, res)
		return
	}
	err := r.write(res, r.k.Swap(d.Name, tmpSpec.Name))
	if errors.Is(err, ErrTypeMismatch) {
		// The kernel swaps only sets of one type and family. The old set can go only if no
		// rule references it; then the filled twin cannot be renamed either, so the set is
		// created again and refilled (a brief window, acceptable only because nothing
		// matches against it).
		r.write(res, r.k.Destroy(tmpSpec.Name))
		if err := r.write(res, r.k.Destroy(d.Name)); err != nil {
			res.fail(d.Name, fmt.Errorf("set %s must change type or family, but cannot be destroyed (remove the iptables rules that use it first): %w", d.Name, err))
			return
		}
		r.rebuild(d, final, false, res)
		return
	}
	if err != nil {
		res.fail(d.Name, fmt.Errorf("rebuild %s: swap with %s: %w", d.Name, tmpSpec.Name, err))
		r.write(res, r.k.Destroy(tmpSpec.Name))
		r.relist(d, res)
		return
	}
	r.sets[d.Name] = &set{spec: spec, entries: final}
	// The twin now holds the old content.
	if err := r.write(res, r.k.Destroy(tmpSpec.Name)); err != nil && !errors.Is(err, ErrSetNotFound) {
		res.fail(d.Name, fmt.Errorf("destroy %s after the swap (Resync retries): %w", tmpSpec.Name, err))
	}
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
		return
	}
}

package ipset

import (
	"errors"
	"fmt"
	"strings"

	"github.com/kube-ipvs/kube-ipvs/firewall"
)

// Resync makes the kernel hold exactly the defined sets with the desired entries (those
// mapped to true); see ResyncSets.
func (r *Reconciler) Resync(defs []firewall.SetDef, desired map[firewall.SetName]map[firewall.Entry]bool) Result {
	return r.ResyncSets(defs, firewall.EntryMap(desired))
}

// ResyncSets makes the kernel hold exactly the defined sets with the desired entries: it is
// the sets' check (BeginCheck) in one step as large as everything, listed through the
// Reconciler's own socket. It lists every set's header, creates missing sets, rebuilds sets
// of the wrong type, family or range or too small for their content, destroys every other
// set whose name starts with firewall.Prefix (such as a set an older version used, or a
// temporary twin left by a crash), then lists the others' entries and adds and deletes the
// difference. A set still referenced by iptables rules cannot be destroyed: that is
// reported in Errors and retried on the next repair. Sets without the prefix are never
// touched. When the kernel already matches, ResyncSets writes nothing.
//
// The definitions are remembered: Apply accepts changes to these sets only.
//
// desired is read, not copied (the Tracker itself, at a full sync).
func (r *Reconciler) ResyncSets(defs []firewall.SetDef, desired firewall.DesiredSets) Result {
	c, res := r.beginCheck(defs, desired, nil)
	if c != nil {
		res.merge(c.Wait())
	}
	return res
}

// merge adds o into res.
func (res *Result) merge(o Result) {
	res.Writes += o.Writes
	for n, e := range o.Errors {
		res.fail(n, e)
	}
	res.Err = errors.Join(res.Err, o.Err)
}

// wanted is the desired content of one set: what desired holds for it, but the invalid.
type wanted struct {
	desired firewall.DesiredSets
	name    firewall.SetName
	invalid map[firewall.Packed]struct{}
}

// wantedOf is the desired content of set d; the entries it cannot hold are reported in res
// (unless nil).
func wantedOf(d firewall.SetDef, desired firewall.DesiredSets, res *Result) wanted {
	w := wanted{desired: desired, name: d.Name}
	desired.Range(d.Name, func(p firewall.Packed) bool {
		if err := d.Check(p.Entry()); err != nil {
			if res != nil {
				res.fail(d.Name, err)
			}
			if w.invalid == nil {
				w.invalid = map[firewall.Packed]struct{}{}
			}
			w.invalid[p] = struct{}{}
		}
		return true
	})
	return w
}

func (w wanted) has(p firewall.Packed) bool {
	return !w.isInvalid(p) && w.desired.Has(w.name, p)
}

func (w wanted) isInvalid(p firewall.Packed) bool {
	_, bad := w.invalid[p]
	return bad
}

// set returns a copy of the wanted entries: a set's new cache after a rebuild.
func (w wanted) set() map[firewall.Packed]struct{} {
	out := make(map[firewall.Packed]struct{}, w.desired.Count(w.name))
	w.desired.Range(w.name, func(p firewall.Packed) bool {
		if _, bad := w.invalid[p]; !bad {
			out[p] = struct{}{}
		}
		return true
	})
	return out
}

// resyncEntries lists one fitting set that has no cache yet, makes the listing its cache and
// writes the difference with desired.
func (r *Reconciler) resyncEntries(d firewall.SetDef, spec Spec, desired firewall.DesiredSets, res *Result) {
	w := wantedOf(d, desired, res)
	listed, err := r.listEntries(d.Name)
	if errors.Is(err, ErrSetNotFound) {
		r.rebuild(d, w.set(), false, res)
		return
	}
	if err != nil {
		res.fail(d.Name, err)
		return
	}
	s := &set{spec: spec, entries: listed}
	r.sets[d.Name] = s
	var adds, dels []firewall.Packed
	// Inside Range only the invalid are looked up: desired (the Tracker) is locked while it
	// calls back, and what it ranges over it has.
	w.desired.Range(d.Name, func(p firewall.Packed) bool {
		if _, ok := s.entries[p]; !ok && !w.isInvalid(p) {
			adds = append(adds, p)
		}
		return true
	})
	for p := range s.entries {
		if !w.has(p) {
			dels = append(dels, p)
		}
	}
	if d.Type != firewall.BitmapPort && len(s.entries)+len(adds) > int(spec.MaxElem) {
		// Adding before deleting would overflow it: rebuild it with exactly the wanted.
		r.rebuild(d, w.set(), true, res)
		return
	}
	r.addOrRebuild(d, s, adds, res)
	r.deletions(d, dels, res)
}

// ownHeaders lists the headers of the sets whose names start with firewall.Prefix: the only
// sets Resync and Cleanup may write or destroy.
func (r *Reconciler) ownHeaders() ([]Header, error) { return listHeadersFrom(r.k) }

func (r *Reconciler) listHeaders() ([]Header, error) { return listAllHeaders(r.k) }

// listHeadersFrom lists the proxy's own headers through k.
func listHeadersFrom(k Kernel) ([]Header, error) {
	headers, err := listAllHeaders(k)
	if err != nil {
		return nil, err
	}
	own := headers[:0]
	for _, h := range headers {
		if strings.HasPrefix(string(h.Name), firewall.Prefix) {
			own = append(own, h)
		}
	}
	return own, nil
}

func listAllHeaders(k Kernel) ([]Header, error) {
	var err error
	for range listAttempts {
		var hs []Header
		if hs, err = k.ListHeaders(); err == nil {
			return hs, nil
		}
		if !errors.Is(err, ErrDumpInterrupted) {
			break
		}
	}
	return nil, err
}

// listEntries lists a set's entries into a map, through the kernel's streaming listing
// when it has one (no slice of every entry in between).
func (r *Reconciler) listEntries(n firewall.SetName) (map[firewall.Packed]struct{}, error) {
	return listEntriesFrom(r.k, n, 0)
}

// listEntriesFrom lists a set's entries through k (the Reconciler's own kernel, or the one
// a background check lists through). hint is how many entries are expected: a map grown
// entry by entry to half a million rehashes all the way (a background check's listing
// spent most of its CPU there at 50,000 Services, beside the sync loop).
func listEntriesFrom(k Kernel, n firewall.SetName, hint int) (map[firewall.Packed]struct{}, error) {
	var err error
	for range listAttempts {
		out := make(map[firewall.Packed]struct{}, hint)
		err = k.EachEntry(n, func(e firewall.Entry) { out[e.Pack()] = struct{}{} })
		if err == nil {
			return out, nil
		}
		if !errors.Is(err, ErrDumpInterrupted) {
			break
		}
	}
	return nil, err
}

// ListEntries collects one set's entries (Kernel.EachEntry); ErrSetNotFound if there is no
// such set.
func ListEntries(k Kernel, name firewall.SetName) ([]firewall.Entry, error) {
	var out []firewall.Entry
	if err := k.EachEntry(name, func(e firewall.Entry) { out = append(out, e) }); err != nil {
		return nil, err
	}
	return out, nil
}

func checkDef(d firewall.SetDef) error {
	switch {
	case !strings.HasPrefix(string(d.Name), firewall.Prefix):
		return fmt.Errorf("set %s: name lacks the prefix %s", d.Name, firewall.Prefix)
	case len(firewall.TempName(d.Name)) > firewall.MaxSetNameLen:
		return fmt.Errorf("set %s: name too long for its temporary twin (%d bytes max)", d.Name, firewall.MaxSetNameLen-2)
	case d.Type == firewall.BitmapPort && d.PortFrom > d.PortTo:
		return fmt.Errorf("set %s: empty port range", d.Name)
	}
	return nil
}

// Package ipset keeps the kernel's ipsets as package firewall defines them, over netlink
// (never one ipset process per entry).
//
// The Reconciler caches what each set holds, so Apply writes only entries that change (no
// kernel call at all when nothing does), in batches of up to BatchSize entries per netlink
// request. Invariants:
//   - Only sets whose names start with firewall.Prefix are ever written or destroyed.
//   - A set is sized to its content (Size): hash size and maximum element count grow with
//     it. A set that must change type, family, range or grow past its maximum is rebuilt
//     wholesale: a temporary twin (firewall.TempName) is created at the new size, filled
//     completely, then swapped in with one kernel call, so no packet ever sees a half-filled
//     set, and iptables rules keep referring to the same name throughout.
//   - The cache holds exactly the writes the kernel acknowledged. A batch that fails is
//     retried entry by entry, so errors name the entries and the cache stays exact; a set
//     found missing (someone destroyed it) is re-created with the cached content plus the
//     change.
package ipset

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/kube-ipvs/kube-ipvs/firewall"
)

// DefaultBatchSize is how many entries go into one netlink request: about 40 KB for the
// largest entries, well inside a netlink socket's buffers.
const DefaultBatchSize = 500

// listAttempts bounds how often a listing is repeated after the kernel reported it
// interrupted.
const listAttempts = 3

// Result reports one Apply, Resync or Cleanup.
type Result struct {
	// Writes is how many kernel write requests were made (successful or not); a batch of
	// entries is one.
	Writes int
	// Errors holds, per set, what went wrong with it; other sets were still done.
	Errors map[firewall.SetName]error
	// Err is set when the operation as a whole failed before writing (a listing failed).
	Err error
}

func (res *Result) fail(n firewall.SetName, err error) {
	if res.Errors == nil {
		res.Errors = map[firewall.SetName]error{}
	}
	res.Errors[n] = errors.Join(res.Errors[n], err)
}

// Reconciler keeps kube-ipvs' ipsets. It is safe for concurrent use; calls are serialized.
type Reconciler struct {
	mu     sync.Mutex
	k      Kernel
	defs   map[firewall.SetName]firewall.SetDef
	sets   map[firewall.SetName]*set
	writes atomic.Uint64

	// BatchSize is the number of entries per add or delete request (DefaultBatchSize when
	// 0). Set it before the first call.
	BatchSize int
}

// set is the cached state of one kernel set. Entries are packed (firewall.Packed): at
// 50,000 Services the hairpin set alone holds over half a million.
type set struct {
	spec    Spec
	entries map[firewall.Packed]struct{}
}

// New returns a Reconciler with an empty cache: call Resync first; it creates the sets and
// adopts what the kernel already has.
func New(k Kernel) *Reconciler {
	return &Reconciler{k: k, defs: map[firewall.SetName]firewall.SetDef{}, sets: map[firewall.SetName]*set{}}
}

// Writes returns the number of kernel write requests made so far.
func (r *Reconciler) Writes() uint64 { return r.writes.Load() }

// Spec returns the cached spec of a set (its size as last created or listed).
func (r *Reconciler) Spec(n firewall.SetName) (Spec, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s, ok := r.sets[n]
	if !ok {
		return Spec{}, false
	}
	return s.spec, true
}

// Entries returns the cached entries of a set, sorted.
func (r *Reconciler) Entries(n firewall.SetName) []firewall.Entry {
	r.mu.Lock()
	defer r.mu.Unlock()
	s, ok := r.sets[n]
	if !ok {
		return nil
	}
	return unpack(nil, sortedPacked(s.entries))
}

// Count returns the number of cached entries of a set.
func (r *Reconciler) Count(n firewall.SetName) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s, ok := r.sets[n]; ok {
		return len(s.entries)
	}
	return 0
}

// Resync makes the kernel hold exactly the defined sets with the desired entries (those
// mapped to true); see ResyncSets.
func (r *Reconciler) Resync(defs []firewall.SetDef, desired map[firewall.SetName]map[firewall.Entry]bool) Result {
	return r.ResyncSets(defs, firewall.EntryMap(desired))
}

// ResyncSets makes the kernel hold exactly the defined sets with the desired entries: it lists every set's header, creates missing sets, rebuilds sets of the
// wrong type, family or range or too small for their content, lists the others' entries and
// adds and deletes the difference, then destroys every other set whose name starts with
// firewall.Prefix (such as a set an older version used, or a temporary twin left by a
// crash). A set still referenced by iptables rules cannot be destroyed: that is reported in
// Errors and retried on the next Resync. Sets without the prefix are never touched. When
// the kernel already matches, Resync writes nothing.
//
// The definitions are remembered: Apply accepts changes to these sets only.
//
// desired is read, not copied (the Tracker itself, at a full sync).
func (r *Reconciler) ResyncSets(defs []firewall.SetDef, desired firewall.DesiredSets) Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	res := Result{}
	headers, err := r.listHeaders()
	if err != nil {
		res.Err = fmt.Errorf("ipset resync: %w", err)
		return res
	}
	have := map[firewall.SetName]Header{}
	for _, h := range headers {
		if strings.HasPrefix(string(h.Name), firewall.Prefix) {
			have[h.Name] = h
		}
	}

	newDefs := map[firewall.SetName]firewall.SetDef{}
	for _, d := range defs {
		if err := checkDef(d); err != nil {
			res.fail(d.Name, err)
			continue
		}
		newDefs[d.Name] = d
		w := wanted{desired: desired, name: d.Name}
		desired.Range(d.Name, func(p firewall.Packed) bool {
			if err := d.Check(p.Entry()); err != nil {
				res.fail(d.Name, err)
				if w.invalid == nil {
					w.invalid = map[firewall.Packed]struct{}{}
				}
				w.invalid[p] = struct{}{}
			}
			return true
		})
		n := desired.Count(d.Name) - len(w.invalid)
		h, exists := have[d.Name]
		switch {
		case !exists:
			r.rebuild(d, w.set(), false, &res)
		case fits(h.Spec, d, n) != nil:
			r.rebuild(d, w.set(), true, &res)
		default:
			r.resyncEntries(d, h.Spec, w, &res)
		}
	}
	if named, ok := desired.(interface{ Names() []firewall.SetName }); ok {
		for _, n := range named.Names() {
			if _, ok := newDefs[n]; !ok && desired.Count(n) > 0 {
				res.fail(n, fmt.Errorf("entries for set %s, which is not defined", n))
			}
		}
	}
	r.defs = newDefs
	for n := range r.sets {
		if _, ok := newDefs[n]; !ok {
			delete(r.sets, n)
		}
	}

	var extra []firewall.SetName
	for n := range have {
		if _, ok := newDefs[n]; !ok {
			extra = append(extra, n)
		}
	}
	sort.Slice(extra, func(i, j int) bool { return extra[i] < extra[j] })
	for _, n := range extra {
		if err := r.write(&res, r.k.Destroy(n)); err != nil && !errors.Is(err, ErrSetNotFound) {
			res.fail(n, fmt.Errorf("destroy set %s, no longer used: %w", n, err))
		}
	}
	return res
}

// wanted is the desired content of one set: what desired holds for it, but the invalid.
type wanted struct {
	desired firewall.DesiredSets
	name    firewall.SetName
	invalid map[firewall.Packed]struct{}
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

// resyncEntries lists one fitting set and writes the difference to w.
func (r *Reconciler) resyncEntries(d firewall.SetDef, spec Spec, w wanted, res *Result) {
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
		for e, want := range changes[n] {
			if err := d.Check(e); err != nil {
				res.fail(n, err)
				continue
			}
			p := e.Pack()
			_, has := s.entries[p]
			switch {
			case want && !has:
				adds = append(adds, p)
			case !want && has:
				dels = append(dels, p)
			}
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
		err := r.write(res, op(n, buf))
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
			if err := r.write(res, op(n, []firewall.Entry{e})); err != nil {
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

// Cleanup destroys every set whose name starts with firewall.Prefix and forgets them. Run
// it after the iptables rules that use them are gone (iptables Cleanup); sets still
// referenced are reported in Errors and left.
func (r *Reconciler) Cleanup() Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	res := Result{}
	headers, err := r.listHeaders()
	if err != nil {
		res.Err = fmt.Errorf("ipset cleanup: %w", err)
		return res
	}
	r.sets = map[firewall.SetName]*set{}
	r.defs = map[firewall.SetName]firewall.SetDef{}
	for _, h := range headers {
		if !strings.HasPrefix(string(h.Name), firewall.Prefix) {
			continue
		}
		if err := r.write(&res, r.k.Destroy(h.Name)); err != nil && !errors.Is(err, ErrSetNotFound) {
			res.fail(h.Name, err)
		}
	}
	return res
}

// write accounts for one kernel write request that returned err.
func (r *Reconciler) write(res *Result, err error) error {
	res.Writes++
	r.writes.Add(1)
	return err
}

func (r *Reconciler) listHeaders() ([]Header, error) {
	var err error
	for range listAttempts {
		var hs []Header
		if hs, err = r.k.ListHeaders(); err == nil {
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
	var err error
	for range listAttempts {
		out := map[firewall.Packed]struct{}{}
		if each, ok := r.k.(entryStreamer); ok {
			err = each.EachEntry(n, func(e firewall.Entry) { out[e.Pack()] = struct{}{} })
		} else {
			var es []firewall.Entry
			if es, err = r.k.ListEntries(n); err == nil {
				for _, e := range es {
					out[e.Pack()] = struct{}{}
				}
			}
		}
		if err == nil {
			return out, nil
		}
		if !errors.Is(err, ErrDumpInterrupted) {
			break
		}
	}
	return nil, err
}

// entryStreamer is a Kernel that can hand a set's entries over one by one as it parses them.
type entryStreamer interface {
	EachEntry(name firewall.SetName, fn func(firewall.Entry)) error
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

func sortPacked(s []firewall.Packed) {
	slices.SortFunc(s, firewall.Packed.Compare)
}

func sortedPacked(m map[firewall.Packed]struct{}) []firewall.Packed {
	out := make([]firewall.Packed, 0, len(m))
	for p := range m {
		out = append(out, p)
	}
	sortPacked(out)
	return out
}

package ipset

import (
	"errors"
	"fmt"
	"hash/maphash"
	"slices"
	"sort"
	"strings"

	"github.com/kube-ipvs/kube-ipvs/firewall"
)

// SetsCheck is the sets' repair, the one there is: BeginCheck judges the headers (creates
// missing sets, rebuilds misfit ones, lists the ones not cached yet, destroys stale ones),
// then lists each other set and compares it with the desired state, in the background
// through Lister while Apply goes on; each StepNow writes only what really drifted in the
// sets whose listing is in. ResyncSets is the check in one step as large as everything
// (listed through the Reconciler's own socket, then Wait): the first repair, and every
// repair asked to be whole.
//
// A listing that runs while Apply writes may or may not show those writes, so it is never
// believed for an entry Apply changed meanwhile (the set's watch records them): for those the
// cache, which holds exactly what the kernel acknowledged, says what the kernel has. Every
// other entry was left alone by the proxy while it was listed, and the listing is the truth
// for it. A set Apply rebuilt, or a repair or cleanup judged meanwhile, is skipped: its
// content was just written whole.
type SetsCheck struct {
	r       *Reconciler
	desired firewall.DesiredSets
	defs    []firewall.SetDef
	// lister lists in the background (nil: everything is listed when the headers are
	// judged, through the Reconciler's own socket).
	lister Kernel
	// headers brings the background listing of the headers (nil once judged); headerGen
	// is the Reconciler's headerGen when it began.
	headers   chan headerListing
	headerGen uint64
	failed    bool // the headers could not be listed: the check ends
	results   chan setListing
	pending   int
}

// setListing is one set listed and compared in the background, entry by entry as the
// kernel's datagrams come in, without keeping the entries: a map of the listing (half a
// million entries for the hairpin set at 50,000 Services, 58 MB) was the largest garbage of
// a repair cycle, and the collector chased it while changes waited. What is kept is a
// fingerprint per listed entry (8 bytes, in a buffer reused from cycle to cycle) and counts.
//
// The listing may or may not show what Apply writes meanwhile, so it is never believed for an
// entry Apply touched (the set's watch records them): finish takes back what the comparison
// counted for each one the fingerprints say was listed, and the cache, which holds exactly
// what the kernel acknowledged, says what the kernel has for it.
type setListing struct {
	def firewall.SetDef
	// listed holds the fingerprints (fingerprint) of every entry listed, sorted.
	listed []uint64
	// Of the entries compared: wanted how many were desired and stale those that were not;
	// cached how many the cache held and uncached those it did not (normally none).
	wanted, cached  int
	stale, uncached map[firewall.Packed]struct{}
	// twice: some entry was listed twice (or two share a fingerprint), and the counts are
	// not to be trusted.
	twice bool
	err   error
}

// has reports whether the listing showed p. Two entries share a 64-bit fingerprint with a
// chance of about one in 10^12 per repair cycle at 50,000 Services; should it happen to an
// entry Apply touched, the counts are off by one and the check walks the cache once more
// than it needed to, or misses one drifted entry until the next cycle.
func (l *setListing) has(seed maphash.Seed, p firewall.Packed) bool {
	_, ok := slices.BinarySearch(l.listed, fingerprint(seed, p))
	return ok
}

func fingerprint(seed maphash.Seed, p firewall.Packed) uint64 { return maphash.Comparable(seed, p) }

func addTo(m *map[firewall.Packed]struct{}, p firewall.Packed) {
	if *m == nil {
		*m = map[firewall.Packed]struct{}{}
	}
	(*m)[p] = struct{}{}
}

// watchState is what Apply changed in a set while a background check listed it.
type watchState struct {
	touched map[firewall.Packed]struct{}
	void    bool
}

func (w *watchState) touch(p firewall.Packed) { w.touched[p] = struct{}{} }

// voidCheck makes a background check of the set skip it (r.mu held).
func (r *Reconciler) voidCheck(n firewall.SetName) {
	if w := r.watch[n]; w != nil {
		w.void = true
	}
}

func (r *Reconciler) voidChecks() {
	for _, w := range r.watch {
		w.void = true
	}
}

// BeginCheck starts a check of the defined sets against desired, which must stay valid (and
// safe to read from another goroutine) until the check is done: the Tracker is. The defs
// become the Reconciler's once the headers are judged. With a Lister the headers are listed
// in the background too, and judged by the first StepNow that finds them in: the kernel
// sums a hash set's buckets for its header (175 ms for the hairpin set of 50,000 Services
// under emulation), which no step should wait for. Without one, everything is listed here,
// and the Result is that of the header work.
func (r *Reconciler) BeginCheck(defs []firewall.SetDef, desired firewall.DesiredSets) (*SetsCheck, Result) {
	return r.beginCheck(defs, desired, r.Lister)
}

// beginCheck starts a check that lists through lister in the background, or (nil) here,
// through the Reconciler's own socket. nil: the headers could not be listed.
func (r *Reconciler) beginCheck(defs []firewall.SetDef, desired firewall.DesiredSets, lister Kernel) (*SetsCheck, Result) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.voidChecks() // an older check still under way judges nothing more
	c := &SetsCheck{r: r, desired: desired, defs: defs, lister: lister}
	if lister == nil {
		headers, err := r.ownHeaders()
		if err != nil {
			return nil, Result{Err: fmt.Errorf("ipset check: %w", err)}
		}
		return c, c.judgeHeaders(headers)
	}
	c.listHeaders()
	return c, Result{}
}

// headerListing is a background listing of the proxy's set headers.
type headerListing struct {
	headers []Header
	err     error
}

// listHeaders lists the headers through the Lister in the background (r.mu held).
func (c *SetsCheck) listHeaders() {
	c.headerGen = c.r.headerGen
	c.headers = make(chan headerListing, 1)
	go func(k Kernel) {
		hs, err := listHeadersFrom(k)
		c.headers <- headerListing{headers: hs, err: err}
	}(c.lister)
}

// takeHeaders judges the headers if their listing is in (in: it was; wait: waiting for
// it), then starts the entries' listings. A listing that a header write (a set created,
// rebuilt or destroyed) may have overtaken is thrown away and taken again.
func (c *SetsCheck) takeHeaders(wait bool) (res Result, in bool) {
	hl, ok := receive(c.headers, wait)
	if !ok {
		return res, false
	}
	r := c.r
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.headerGen != c.headerGen {
		c.listHeaders()
		return res, false
	}
	c.headers = nil
	if hl.err != nil {
		c.failed = true
		return Result{Err: fmt.Errorf("ipset check: %w", hl.err)}, true
	}
	return c.judgeHeaders(hl.headers), true
}

// judgeHeaders creates missing sets, rebuilds misfit ones, lists the ones without a cache,
// destroys stale ones and starts the listing of each other set's entries (r.mu held).
func (c *SetsCheck) judgeHeaders(headers []Header) Result {
	r, desired := c.r, c.desired
	res := Result{}
	have := map[firewall.SetName]Header{}
	for _, h := range headers {
		have[h.Name] = h
	}
	newDefs := map[firewall.SetName]firewall.SetDef{}
	var fitting []firewall.SetDef
	for _, d := range c.defs {
		if err := checkDef(d); err != nil {
			res.fail(d.Name, err)
			continue
		}
		newDefs[d.Name] = d
		h, exists := have[d.Name]
		switch {
		case !exists:
			r.rebuild(d, wantedOf(d, desired, &res).set(), false, &res)
		case fits(h.Spec, d, desired.Count(d.Name)) != nil:
			r.rebuild(d, wantedOf(d, desired, &res).set(), true, &res)
		case r.sets[d.Name] == nil:
			// Not cached (a new Reconciler): Apply needs the cache, so it is listed here.
			r.resyncEntries(d, h.Spec, desired, &res)
		default:
			fitting = append(fitting, d)
			r.sets[d.Name].spec = h.Spec
		}
	}
	for _, n := range desired.Names() {
		if _, ok := newDefs[n]; !ok && desired.Count(n) > 0 {
			res.fail(n, fmt.Errorf("entries for set %s, which is not defined", n))
		}
	}
	r.defs = newDefs
	for n := range r.sets {
		if _, ok := newDefs[n]; !ok {
			delete(r.sets, n)
		}
	}
	r.destroyStale(have, newDefs, &res)
	c.startListings(fitting)
	return res
}

// startListings lists and compares the fitting sets' entries, through the check's lister in
// the background, or here through the Reconciler's own socket (r.mu held).
func (c *SetsCheck) startListings(fitting []firewall.SetDef) {
	r := c.r
	c.results, c.pending = make(chan setListing, len(fitting)), len(fitting)
	if r.watch == nil {
		r.watch = map[firewall.SetName]*watchState{}
	}
	type job struct {
		d   firewall.SetDef
		w   *watchState
		buf []uint64
	}
	jobs := make([]job, 0, len(fitting))
	for _, d := range fitting {
		w := &watchState{touched: map[firewall.Packed]struct{}{}}
		r.watch[d.Name] = w
		s := r.sets[d.Name]
		jobs = append(jobs, job{d, w, s.listed})
		s.listed = nil // the check's until it is finished
	}
	if c.lister == nil {
		// Nothing writes meanwhile: r.mu is held already.
		for _, j := range jobs {
			c.results <- r.compareListing(r.k, j.d, c.desired, j.w, j.buf, false)
		}
		return
	}
	go func(k Kernel) {
		for _, j := range jobs {
			c.results <- r.compareListing(k, j.d, c.desired, j.w, j.buf, true)
		}
	}(c.lister)
}

// destroyStale destroys the proxy's sets that are no longer defined (r.mu held).
func (r *Reconciler) destroyStale(have map[firewall.SetName]Header, defs map[firewall.SetName]firewall.SetDef, res *Result) {
	var extra []firewall.SetName
	for n := range have {
		if _, ok := defs[n]; !ok && strings.HasPrefix(string(n), firewall.Prefix) {
			extra = append(extra, n)
		}
	}
	sort.Slice(extra, func(i, j int) bool { return extra[i] < extra[j] })
	if len(extra) > 0 {
		r.headerGen++
	}
	for _, n := range extra {
		if err := r.noteWrite(res, r.k.Destroy(n)); err != nil && !errors.Is(err, ErrSetNotFound) {
			res.fail(n, fmt.Errorf("destroy set %s, no longer used: %w", n, err))
		}
	}
}

// compareListBatch is how many listed entries are compared per holding of r.mu.
const compareListBatch = 128

// compareListing lists one set through k and compares each entry with the cache and with
// desired as the datagrams come in (see setListing), buf[:0] holding the fingerprints. Only
// the cache's look-ups hold r.mu (lock: false when the caller holds it already), a batch of
// entries at a time: Apply takes r.mu for a change, and at 50,000 Services a change waited
// behind batches of 512 whole comparisons (the Tracker's look-ups with them), or behind a
// comparing goroutine the scheduler had set aside with the lock held (execution trace).
// desired is safe to read without r.mu, and whatever a comparison saw of an entry Apply
// touches is taken back by finish. Between batches a background comparison gives way as a
// listing does between datagrams (package foreground). A listing the kernel reports
// interrupted is taken again from the start.
func (r *Reconciler) compareListing(k Kernel, d firewall.SetDef, desired firewall.DesiredSets, w *watchState, buf []uint64, lock bool) setListing {
	var l setListing
	batch := make([]firewall.Packed, 0, compareListBatch)
	compare := func() {
		for _, p := range batch {
			l.listed = append(l.listed, fingerprint(r.seed, p))
			if desired.Has(d.Name, p) {
				l.wanted++
			} else {
				addTo(&l.stale, p)
			}
		}
		if lock {
			r.mu.Lock()
		}
		if s := r.sets[d.Name]; s != nil && !w.void {
			for _, p := range batch {
				if _, ok := s.entries[p]; ok {
					l.cached++
				} else {
					addTo(&l.uncached, p)
				}
			}
		}
		if lock {
			r.mu.Unlock()
			r.Gate.Yield()
		}
		batch = batch[:0]
	}
	if want := desired.Count(d.Name); cap(buf) < want {
		// Room for the entries desired and a few more at once: grown by append from
		// nothing, the buffer of half a million fingerprints allocated five times its size.
		buf = make([]uint64, 0, want+want/16+64)
	}
	for range listAttempts {
		l = setListing{def: d, listed: buf[:0]}
		each := func(e firewall.Entry) {
			if batch = append(batch, e.Pack()); len(batch) == compareListBatch {
				compare()
			}
		}
		l.err = k.EachEntry(d.Name, each)
		if l.err == nil {
			compare()
			// Sorted beside the sync loop, for finish's look-ups (a few, in its step).
			slices.Sort(l.listed)
			for i := 1; i < len(l.listed); i++ {
				if l.listed[i] == l.listed[i-1] {
					// An entry listed twice (a dump beside writes can, rarely) would be
					// counted twice: the counts cannot be trusted, and the set is judged
					// again by the next cycle.
					l.twice = true
					break
				}
			}
			return l
		}
		batch = batch[:0]
		buf = l.listed
		if !errors.Is(l.err, ErrDumpInterrupted) {
			break
		}
	}
	return l
}

// StepNow judges the headers once their listing is in, finishes the sets whose listing is
// in, without waiting, and writes what they lack or hold too much; finished is how many it
// finished (the headers' judgment counts as one). done: every set is finished.
func (c *SetsCheck) StepNow() (res Result, done bool, finished int) { return c.step(false) }

// Wait finishes every set, however long their listings take: the rest of the check in one
// step.
func (c *SetsCheck) Wait() Result {
	res, _, _ := c.step(true)
	return res
}

// step is StepNow, or (wait) Wait.
func (c *SetsCheck) step(wait bool) (res Result, done bool, finished int) {
	for c.headers != nil {
		r, in := c.takeHeaders(wait)
		if !in && !wait {
			return res, false, 0
		}
		if in {
			if res, finished = r, 1; c.failed {
				return res, true, finished
			}
		}
	}
	for c.pending > 0 {
		l, ok := receive(c.results, wait)
		if !ok {
			return res, false, finished
		}
		c.finish(l, &res)
		finished++
	}
	return res, true, finished
}

// receive takes the next value from ch, waiting for it when wait is set; ok is false when
// none was in.
func receive[T any](ch <-chan T, wait bool) (v T, ok bool) {
	if wait {
		return <-ch, true
	}
	select {
	case v = <-ch:
		return v, true
	default:
		return v, false
	}
}

// finish judges one listed set, makes the cache what the kernel holds and writes the
// difference with desired.
func (c *SetsCheck) finish(l setListing, res *Result) {
	c.pending--
	r := c.r
	r.mu.Lock()
	defer r.mu.Unlock()
	n := l.def.Name
	w := r.watch[n]
	delete(r.watch, n)
	s := r.sets[n]
	if s != nil {
		s.listed = l.listed[:0] // the next check lists into it
	}
	if w == nil || w.void || s == nil || l.twice {
		return // judged or rebuilt meanwhile, or to be judged by the next cycle
	}
	if errors.Is(l.err, ErrSetNotFound) {
		r.rebuild(l.def, wantedOf(l.def, c.desired, res).set(), false, res) // destroyed meanwhile
		return
	}
	if l.err != nil {
		res.fail(n, fmt.Errorf("list set %s: %w", n, l.err))
		return
	}
	wanted, stale := c.settle(l, s, w)
	var adds []firewall.Packed
	if wanted < c.desired.Count(n) {
		// Desired entries are missing (drift, or entries the set cannot hold): find them.
		c.desired.Range(n, func(p firewall.Packed) bool {
			if _, ok := s.entries[p]; ok {
				return true
			}
			if err := l.def.Check(p.Entry()); err != nil {
				res.fail(n, err)
			} else {
				adds = append(adds, p)
			}
			return true
		})
	}
	dels := make([]firewall.Packed, 0, len(stale))
	for p := range stale {
		dels = append(dels, p)
	}
	if l.def.Type != firewall.BitmapPort && len(s.entries)+len(adds) > int(s.spec.MaxElem) {
		r.rebuild(l.def, wantedOf(l.def, c.desired, nil).set(), true, res)
		return
	}
	if l.def.SkbInfo {
		dels = remarked(s, adds, dels)
	}
	r.addOrRebuild(l.def, s, adds, res)
	r.deletions(l.def, dels, res)
}

// settle makes set s's cache what the listing l showed the kernel to hold, taking back
// what the comparison counted of the entries Apply touched meanwhile (w) and judging those
// by the cache, and returns how many of the kernel's entries are desired and which are
// not (r.mu held).
func (c *SetsCheck) settle(l setListing, s *set, w *watchState) (wanted int, stale map[firewall.Packed]struct{}) {
	r, n := c.r, l.def.Name
	// Entries Apply touched: the cache knows their state, so what their comparison counted
	// (before or after Apply wrote them) is taken back. The counts are then of untouched
	// entries only.
	wanted, stale = l.wanted, l.stale
	cached := l.cached
	untouchedCached := len(s.entries)
	for p := range w.touched {
		if _, ok := s.entries[p]; ok {
			untouchedCached--
		}
		if !l.has(r.seed, p) {
			continue
		}
		if _, was := stale[p]; was {
			delete(stale, p)
		} else {
			wanted--
		}
		if _, was := l.uncached[p]; was {
			delete(l.uncached, p)
		} else {
			cached--
		}
	}
	// The cache becomes what the kernel holds: listed entries it lacked are added, and
	// cached ones the listing lacked (fewer cached were listed than the cache holds) are
	// found and dropped. Both are drift, made by others; normally neither happens.
	for p := range l.uncached {
		s.entries[p] = struct{}{}
	}
	if cached < untouchedCached {
		for p := range s.entries {
			if _, touched := w.touched[p]; !touched && !l.has(r.seed, p) {
				delete(s.entries, p)
			}
		}
	}
	// Against desired: the touched entries the kernel holds are judged now.
	for p := range w.touched {
		if _, ok := s.entries[p]; !ok {
			continue
		}
		if c.desired.Has(n, p) {
			wanted++
		} else {
			addTo(&stale, p)
		}
	}
	return wanted, stale
}

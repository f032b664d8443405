package ipset

import (
	"errors"
	"fmt"
	"runtime"
	"sort"
	"strings"

	"github.com/kube-ipvs/kube-ipvs/firewall"
)

// SetsCheck is a repair of the sets cut into steps, for a periodic repair that must not hold
// changes up: BeginCheck judges the headers at once (creates missing sets, rebuilds misfit
// ones, destroys stale ones), then lists each fitting set and compares it with the desired
// state in the background, through Lister, while Apply goes on; Step writes only what
// really drifted.
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
	// headers brings the background listing of the headers (nil once judged); headerGen
	// is the Reconciler's headerGen when it began.
	headers   chan headerListing
	headerGen uint64
	failed    bool // the headers could not be listed: the check ends
	results   chan setListing
	pending   int
}

// setListing is one set listed and compared in the background.
type setListing struct {
	def firewall.SetDef
	// entries are what the listing showed; stale those of them not desired when compared
	// (normally none); wanted how many of them were desired.
	entries map[firewall.Packed]struct{}
	stale   map[firewall.Packed]struct{}
	wanted  int
	err     error
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

// BeginCheck starts a stepped check of the defined sets against desired, which must stay
// valid (and safe to read from another goroutine) until the check is done: the Tracker is.
// The defs become the Reconciler's, as with ResyncSets, once the headers are judged. With a
// Lister the headers are listed in the background too, and judged by the first StepNow
// that finds them in: the kernel sums a hash set's buckets for its header (175 ms for the
// hairpin set of 50,000 Services under emulation), which no step should wait for. Without
// one, everything is listed here, and the Result is that of the header work.
func (r *Reconciler) BeginCheck(defs []firewall.SetDef, desired firewall.DesiredSets) (*SetsCheck, Result) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.voidChecks() // an older check still under way judges nothing more
	c := &SetsCheck{r: r, desired: desired, defs: defs}
	if r.Lister == nil {
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
	}(c.r.Lister)
}

// takeHeaders judges the headers if their listing is in (in: it was), then starts the
// entries' listings. A listing that a header write (a set created, rebuilt or destroyed)
// may have overtaken is thrown away and taken again.
func (c *SetsCheck) takeHeaders() (res Result, in bool) {
	var hl headerListing
	select {
	case hl = <-c.headers:
	default:
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

// judgeHeaders creates missing sets, rebuilds misfit ones, destroys stale ones and starts
// the listing of each fitting set's entries (r.mu held).
func (c *SetsCheck) judgeHeaders(headers []Header) Result {
	r, defs, desired := c.r, c.defs, c.desired
	res := Result{}
	have := map[firewall.SetName]Header{}
	for _, h := range headers {
		have[h.Name] = h
	}
	newDefs := map[firewall.SetName]firewall.SetDef{}
	var fitting []firewall.SetDef
	for _, d := range defs {
		if err := checkDef(d); err != nil {
			res.fail(d.Name, err)
			continue
		}
		newDefs[d.Name] = d
		h, exists := have[d.Name]
		switch {
		case !exists:
			r.rebuild(d, validDesired(d, desired), false, &res)
		case fits(h.Spec, d, desired.Count(d.Name)) != nil:
			r.rebuild(d, validDesired(d, desired), true, &res)
		case r.sets[d.Name] == nil:
			// Not cached (a new Reconciler): Apply needs the cache, so it is listed here.
			r.resyncEntries(d, h.Spec, wanted{desired: desired, name: d.Name}, &res)
		default:
			fitting = append(fitting, d)
			r.sets[d.Name].spec = h.Spec
		}
	}
	r.defs = newDefs
	for n := range r.sets {
		if _, ok := newDefs[n]; !ok {
			delete(r.sets, n)
		}
	}
	r.destroyStale(have, newDefs, &res)

	c.results, c.pending = make(chan setListing, len(fitting)), len(fitting)
	if r.watch == nil {
		r.watch = map[firewall.SetName]*watchState{}
	}
	for _, d := range fitting {
		r.watch[d.Name] = &watchState{touched: map[firewall.Packed]struct{}{}}
	}
	if r.Lister == nil {
		// No second socket: list here, through the Reconciler's own (nothing writes meanwhile).
		for _, d := range fitting {
			c.results <- compareListing(r.k, d, desired)
		}
		return res
	}
	go func(k Kernel) {
		for _, d := range fitting {
			c.results <- compareListing(k, d, desired)
		}
	}(r.Lister)
	return res
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
		if err := r.write(res, r.k.Destroy(n)); err != nil && !errors.Is(err, ErrSetNotFound) {
			res.fail(n, fmt.Errorf("destroy set %s, no longer used: %w", n, err))
		}
	}
}

// validDesired is a copy of the desired entries the set can hold.
func validDesired(d firewall.SetDef, desired firewall.DesiredSets) map[firewall.Packed]struct{} {
	out := make(map[firewall.Packed]struct{}, desired.Count(d.Name))
	desired.Range(d.Name, func(p firewall.Packed) bool {
		if d.Check(p.Entry()) == nil {
			out[p] = struct{}{}
		}
		return true
	})
	return out
}

// pause gives way between two pieces of a listing through k: at the foreground gate for a
// background handle (NetlinkKernel.Pause), to another goroutine otherwise.
func pause(k Kernel) {
	if p, ok := k.(interface{ Pause() }); ok {
		p.Pause()
		return
	}
	runtime.Gosched()
}

// compareListing lists one set through k and compares each entry with desired (one short
// look-up each, so the Tracker is never held long).
func compareListing(k Kernel, d firewall.SetDef, desired firewall.DesiredSets) setListing {
	l := setListing{def: d}
	l.entries, l.err = listEntriesFrom(k, d.Name, desired.Count(d.Name))
	if l.err != nil {
		return l
	}
	n := 0
	for p := range l.entries {
		if n++; n%4096 == 0 {
			pause(k) // beside the sync loop: see EachEntry
		}
		if desired.Has(d.Name, p) {
			l.wanted++
		} else {
			if l.stale == nil {
				l.stale = map[firewall.Packed]struct{}{}
			}
			l.stale[p] = struct{}{}
		}
	}
	return l
}

// StepNow judges the headers once their listing is in, finishes the sets whose listing is
// in, without waiting, and writes what they lack or hold too much; finished is how many it
// finished (the headers' judgment counts as one). done: every set is finished.
func (c *SetsCheck) StepNow() (res Result, done bool, finished int) {
	if c.headers != nil {
		r, in := c.takeHeaders()
		if !in {
			return res, false, 0
		}
		if res, finished = r, 1; c.failed {
			return res, true, finished
		}
	}
	for c.pending > 0 {
		select {
		case l := <-c.results:
			c.finish(l, &res)
			finished++
		default:
			return res, false, finished
		}
	}
	return res, true, finished
}

// Wait finishes every set, however long their listings take (a repair in one go).
func (c *SetsCheck) Wait() Result {
	var res Result
	for c.headers != nil {
		r, in := c.takeHeaders()
		if !in {
			runtime.Gosched()
			continue
		}
		if res = r; c.failed {
			return res
		}
	}
	for c.pending > 0 {
		c.finish(<-c.results, &res)
	}
	return res
}

// finish judges one listed set and writes the difference.
func (c *SetsCheck) finish(l setListing, res *Result) {
	c.pending--
	r := c.r
	r.mu.Lock()
	defer r.mu.Unlock()
	n := l.def.Name
	w := r.watch[n]
	delete(r.watch, n)
	s := r.sets[n]
	if w == nil || w.void || s == nil {
		return // judged or rebuilt meanwhile
	}
	if errors.Is(l.err, ErrSetNotFound) {
		r.rebuild(l.def, validDesired(l.def, c.desired), false, res) // destroyed meanwhile
		return
	}
	if l.err != nil {
		res.fail(n, fmt.Errorf("list set %s: %w", n, l.err))
		return
	}
	// What the kernel holds: the listing, but for the entries Apply changed meanwhile, whose
	// state the cache knows.
	kernel, stale, wanted := l.entries, l.stale, l.wanted
	if stale == nil {
		stale = map[firewall.Packed]struct{}{}
	}
	for p := range w.touched {
		if _, listed := kernel[p]; listed {
			if _, was := stale[p]; was {
				delete(stale, p)
			} else {
				wanted--
			}
			delete(kernel, p)
		}
		if _, has := s.entries[p]; has {
			kernel[p] = struct{}{}
			if c.desired.Has(n, p) {
				wanted++
			} else {
				stale[p] = struct{}{}
			}
		}
	}
	s.entries = kernel
	var adds []firewall.Packed
	if wanted < c.desired.Count(n) {
		// Desired entries are missing (drift, or entries the set cannot hold): find them.
		c.desired.Range(n, func(p firewall.Packed) bool {
			if _, ok := kernel[p]; !ok && l.def.Check(p.Entry()) == nil {
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
		final := validDesired(l.def, c.desired)
		r.rebuild(l.def, final, true, res)
		return
	}
	if l.def.SkbInfo {
		dels = remarked(s, adds, dels)
	}
	r.addOrRebuild(l.def, s, adds, res)
	r.deletions(l.def, dels, res)
}

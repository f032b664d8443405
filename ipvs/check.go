package ipvs

import (
	"fmt"
	"iter"
	"maps"
	"slices"
	"sort"
	"time"

	"github.com/kube-ipvs/kube-ipvs/internal/lockwalk"
	"github.com/kube-ipvs/kube-ipvs/model"
)

// Check is one repair of the IPVS table cut into bounded steps, so that changes applied
// between the steps (Apply) never wait for the whole table to be read back. It is the
// table's one repair: a whole repair (the first, and every one asked to be whole) is a
// Check begun by BeginWholeCheck and done in one Step as large as everything.
//
// BeginCheck lists the virtual servers without their real servers (one request): through
// the Reconciler's Lister in the background when it has one, so that no step waits for a
// dump of every virtual server (over a second at 10,000 Services under emulation: the
// kernel walks its table from the start on every netlink round). Each Step then reads the
// real servers of a bounded number of them (one request each), compares them with the
// desired state as it is at that step, and writes what drifted. A step's reads and writes
// happen under the reconciler's lock, so no Apply lands between them; what can be stale is
// the listing. So a virtual server written by anyone since the listing began (its
// generation moved on, see Reconciler.touched) is not judged by the listing: it is read
// again whole at its step, and if the change already made it right the check writes
// nothing for it. A change is never reverted by a repair that began before it.
//
// A listing taken while Apply writes can also miss a virtual server (the kernel's dump
// counts its way through the table, and a deletion before its position shifts the count)
// or show one twice: so a virtual server the background listing lacks is read again before
// anything is written for it, and a repeat is no error.
type Check struct {
	r      *Reconciler
	began  uint64                       // the reconciler's generation when the listing began
	listed map[model.VSKey]model.VSSpec // the kernel's virtual servers at the listing
	keys   []model.VSKey                // what is left to check, in order
	// listing brings the background listing; nil once it is in, or when BeginCheck listed
	// at once (with the lock held: nothing was written meanwhile, and absence is the truth).
	listing chan serviceListing
	// loose: the listing ran beside writes, and a virtual server it lacks is read again.
	loose bool
	// keyed: the check does not list the table (see listing.go); every virtual server it
	// knows of is read by its key at its step, and none other is looked at.
	keyed bool
	// whole: the check began with a dump of the whole table, real servers and all, which
	// became the cache (BeginWholeCheck); the cache says what the kernel holds.
	whole bool
	// failed is why the background listing failed: the check ends with it.
	failed error
	// reals is the map each read of a virtual server's real servers goes into: what read
	// returns lives until the next read, and adopt keeps a copy (or the desired object).
	reals map[model.RSKey]uint32
}

// serviceListing is a background listing of the virtual servers.
type serviceListing struct {
	specs map[model.VSKey]model.VSSpec
	keys  []model.VSKey // the check's order (checkOrder)
	err   error
}

// ServiceLister lists the virtual servers without their real servers, as Kernel's
// ListServices does: the Reconciler's Lister, a handle of its own (one socket cannot carry a
// dump beside Apply's writes).
type ServiceLister interface {
	ListServices() (map[model.VSKey]model.VSSpec, error)
}

// BeginCheck queues for checking every virtual server of the kernel's listing, every one in
// desired and every one the cache holds. Nothing is written. desired walks the desired
// keys and must be safe to run on another goroutine after the call (dataplane.Live.VSKeys
// takes its owner's lock a chunk at a time). With a Lister the listing runs in the
// background, and the steps before it is in check nothing (Listed says whether it is); the
// cache's keys and desired are walked there too, a chunk of keys per holding of the lock
// (lockwalk): at 70,000 virtual servers under emulation, walking them in this call held the
// sync loop for 700 ms, and copying them for it for 300 ms (the copies allocated while the
// garbage collector marked). A key added to either after the call is a write since the
// listing began, judged by a fresh read anyway. Without a Lister the listing is taken here.
func (r *Reconciler) BeginCheck(desired iter.Seq[model.VSKey]) (*Check, error) {
	if r.Lister == nil {
		// Everything in this call, under the lock (desired first: its owner's lock is
		// never taken under the reconciler's).
		keys := slices.Collect(desired)
		r.mu.Lock()
		defer r.mu.Unlock()
		clear(r.touched)
		c := &Check{r: r, began: r.gen}
		if !r.listingDue(r.now()) {
			c.keyed, c.loose = true, true
			c.keys = checkOrder(nil, slices.Values(keys), maps.Keys(r.applied))
			return c, nil
		}
		began := r.now()
		listed, err := r.k.ListServices()
		if err != nil {
			return nil, fmt.Errorf("repair: %w", err)
		}
		r.noteListing(began, r.now())
		c.listed, c.keys = listed, checkOrder(listed, slices.Values(keys), maps.Keys(r.applied))
		return c, nil
	}
	r.mu.Lock()
	clear(r.touched) // every write so far is older than the listing
	c := &Check{r: r, began: r.gen, keyed: !r.listingDue(r.now())}
	r.mu.Unlock()
	c.listing, c.loose = make(chan serviceListing, 1), true
	go func(l ServiceLister, keyed bool) {
		var sl serviceListing
		if !keyed { // else nothing is listed: every known key is read at its step
			began := r.now()
			sl.specs, sl.err = l.ListServices()
			if sl.err == nil {
				r.mu.Lock()
				r.noteListing(began, r.now())
				r.mu.Unlock()
			}
		}
		if sl.err == nil {
			cached := func(yield func(model.VSKey) bool) {
				lockwalk.Keys(&r.mu, func() map[model.VSKey]*model.VirtualServer { return r.applied }, yield)
			}
			sl.keys = checkOrder(sl.specs, cached, desired)
		}
		c.listing <- sl
	}(r.Lister, c.keyed)
	return c, nil
}

// BeginWholeCheck begins a check of the whole table at once: it dumps the table, real
// servers and all (with a predecessor's handover, reading only what the handover does not
// hold: see handover.go), makes the dump the cache, and queues every virtual server the
// kernel holds or desired wants. Nothing is written. The cache then says what the kernel
// holds (Apply keeps it exact), so the steps read nothing more: one Step as large as
// Left() is the repair of everything, and writes nothing when the kernel matches.
func (r *Reconciler) BeginWholeCheck(desired map[model.VSKey]*model.VirtualServer) (*Check, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	applied, shared, took, err := r.dump(desired)
	if err != nil {
		return nil, fmt.Errorf("repair: %w", err)
	}
	end := r.now()
	r.noteListing(end.Add(-took), end)
	r.applied, r.shared = applied, shared
	clear(r.touched)
	c := &Check{r: r, began: r.gen, whole: true, keys: make([]model.VSKey, 0, len(applied)+len(desired)/8)}
	for k := range applied {
		c.keys = append(c.keys, k)
	}
	for k, vs := range desired {
		if _, ok := applied[k]; !ok && vs != nil {
			c.keys = append(c.keys, k)
		}
	}
	return c, nil
}

// dump reads the kernel's virtual servers as the new cache (read.go's whole read, or with a
// predecessor's handover only what it does not hold). One that matches its desired state
// exactly is cached as the desired object itself when sharing (see ShareDesired), and
// copied otherwise: a full resync of a large, healthy table then builds nothing. took is
// how long its last listing of the virtual servers took (listing.go: the dump's reads by
// key are not what the listings are spaced out for).
func (r *Reconciler) dump(desired map[model.VSKey]*model.VirtualServer) (_ map[model.VSKey]*model.VirtualServer, _ map[model.VSKey]bool, took time.Duration, err error) {
	k := &timedLister{Kernel: r.k, now: r.now}
	defer func() { took = k.took }()
	shared := map[model.VSKey]bool{}
	var applied map[model.VSKey]*model.VirtualServer
	keep := func(vs *model.VirtualServer) {
		want := desired[vs.Key]
		if r.share && want != nil && want.Spec.Flags&^model.FlagsWeManage == 0 &&
			vs.Spec.Flags&^model.FlagsWeManage == 0 && vs.Equal(want) {
			applied[vs.Key] = want
			shared[vs.Key] = true
			return
		}
		applied[vs.Key] = normalize(vs)
	}
	if h := r.handover; h != nil {
		r.handover = nil // once
		applied = make(map[model.VSKey]*model.VirtualServer, len(h))
		read, err := eachWithHandover(k, h, keep)
		r.handoverRead = read
		if err == nil {
			return applied, shared, 0, nil
		}
		clear(shared) // read the kernel whole instead
	}
	start := func() {
		applied = make(map[model.VSKey]*model.VirtualServer, len(r.applied))
		clear(shared)
	}
	if err := EachVirtualServer(k, start, keep); err != nil {
		return nil, nil, 0, err
	}
	return applied, shared, 0, nil
}

// timedLister is a Kernel whose ListServices is timed by now: took is the last one's length.
type timedLister struct {
	Kernel
	now  func() time.Time
	took time.Duration
}

func (t *timedLister) ListServices() (map[model.VSKey]model.VSSpec, error) {
	began := t.now()
	m, err := t.Kernel.ListServices()
	t.took = t.now().Sub(began)
	return m, err
}

// ListsTable reports whether the check lists the whole table, and so can find strays (see
// listing.go); otherwise it reads what the proxy knows of by key.
func (c *Check) ListsTable() bool { return !c.keyed }

// checkOrder is the order a check takes the virtual servers in: the listed ones and the
// known ones, each once, sorted. The known ones are normally all listed too: only those that
// are not are added to the listed ones' keys, so that the order costs one key per virtual
// server rather than one per source (three at 70,000 virtual servers: 8 MB a cycle, and
// three times the sort).
func checkOrder(listed map[model.VSKey]model.VSSpec, known ...iter.Seq[model.VSKey]) []model.VSKey {
	keys := make([]model.VSKey, 0, len(listed)+16)
	for k := range listed {
		keys = append(keys, k)
	}
	for _, seq := range known {
		for k := range seq {
			if _, ok := listed[k]; !ok {
				keys = append(keys, k)
			}
		}
	}
	sort.Slice(keys, func(i, j int) bool { return model.VSKeyLess(keys[i], keys[j]) })
	return slices.Compact(keys)
}

// Listed reports whether the listing is in (a step before it checks nothing).
func (c *Check) Listed() bool {
	if c.listing == nil {
		return true
	}
	select {
	case sl := <-c.listing:
		c.listing = nil
		if sl.err != nil {
			c.keys = nil
			c.listed = nil
			c.failed = fmt.Errorf("repair: %w", sl.err)
			return true
		}
		c.listed, c.keys = sl.specs, sl.keys
		return true
	default:
		return false
	}
}

// Left is how many virtual servers the check has yet to look at.
func (c *Check) Left() int { return len(c.keys) }

// Step checks up to budget more virtual servers against desired (the desired state now: nil
// for one that is not wanted) and writes what drifted: a wanted one is made right, one
// that is not wanted is deleted if owned says it is the proxy's. done: nothing is left.
func (c *Check) Step(budget int, desired func(model.VSKey) *model.VirtualServer, owned func(model.VSKey) bool) (res Result, done bool) {
	return c.StepUntil(budget, time.Time{}, nil, desired, owned)
}

// StepUntil is Step, but stops reading once until has passed or yield says so (checked
// after each virtual server, from the second on; zero until, nil yield: no such limit):
// under emulation or load one read can take milliseconds, a step must stay short whatever
// the machine, and a change that is waiting should not wait for the rest of the step.
// Before the background listing is in, a step checks nothing (see Listed); a listing
// that failed ends the check with Result.Err.
func (c *Check) StepUntil(budget int, until time.Time, yield func() bool, desired func(model.VSKey) *model.VirtualServer, owned func(model.VSKey) bool) (res Result, done bool) {
	if !c.Listed() {
		return res, false
	}
	if c.failed != nil {
		return Result{Err: c.failed}, true
	}
	r := c.r
	r.mu.Lock()
	defer r.mu.Unlock()
	n := min(max(budget, 1), len(c.keys))
	changes := make(map[model.VSKey]*model.VirtualServer)
	var failed map[model.VSKey]error
	taken := 0
	for _, key := range c.keys[:n] {
		if taken > 0 && ((!until.IsZero() && time.Now().After(until)) || (yield != nil && yield())) {
			break
		}
		taken++
		have, err := c.read(key)
		if err != nil {
			if failed == nil {
				failed = map[model.VSKey]error{}
			}
			failed[key] = err
			continue
		}
		want := desired(key)
		r.adopt(key, have, want)
		switch {
		case want != nil && r.shared[key] && len(r.draining[key]) == 0:
			r.wantSpec[key] = want.Spec // exactly as desired: nothing to write
		case want != nil:
			changes[key] = want
		case have != nil && owned != nil && owned(key):
			changes[key] = nil
		}
	}
	c.keys = c.keys[taken:]
	res = r.apply(changes)
	for k, e := range failed {
		if res.Errors == nil {
			res.Errors = map[model.VSKey]error{}
		}
		res.Errors[k] = e
	}
	return res, len(c.keys) == 0
}

// read returns what the kernel holds for key now (nil: nothing), from the listing and one
// read of its real servers when nobody wrote it since the listing, else from a fresh read.
// The returned object's Reals may be c.reals, valid until the next read: nothing may keep it.
func (c *Check) read(key model.VSKey) (*model.VirtualServer, error) {
	r := c.r
	if c.whole {
		return r.applied[key], nil
	}
	if c.keyed {
		return c.readByKey(key)
	}
	spec, listed := c.listed[key]
	if r.touched[key] <= c.began && (listed || !c.loose) {
		if !listed {
			return nil, nil // absent at the listing, and not written since
		}
		reals, err := r.k.RealServers(key, c.reals)
		if err != nil {
			return nil, err
		}
		c.reals = reals
		if len(reals) == 0 {
			// No real servers, or no virtual server any more: its spec says which.
			var ok bool
			if spec, ok, err = r.k.ServiceSpec(key); err != nil || !ok {
				return nil, err
			}
		}
		return &model.VirtualServer{Key: key, Spec: spec, Reals: reals}, nil
	}
	return c.readByKey(key)
}

// readByKey reads key's spec and real servers, one request each (nil: the kernel has no
// such virtual server). The Reals are c.reals, as read's.
func (c *Check) readByKey(key model.VSKey) (*model.VirtualServer, error) {
	spec, found, err := c.r.k.ServiceSpec(key)
	if err != nil || !found {
		return nil, err
	}
	reals, err := c.r.k.RealServers(key, c.reals)
	if err != nil {
		return nil, err
	}
	c.reals = reals
	return &model.VirtualServer{Key: key, Spec: spec, Reals: reals}, nil
}

// adopt makes the kernel's state of key (have, nil: absent) the cache, as a whole check
// does with its dump: as the caller's own object when it is exactly what is wanted and
// sharing is on. have may be the cache itself (a whole check's read): then it stays.
func (r *Reconciler) adopt(key model.VSKey, have, want *model.VirtualServer) {
	switch {
	case have != nil && have == r.applied[key]:
	case have == nil:
		r.forget(key)
	case r.share && want != nil && want.Spec.Flags&^model.FlagsWeManage == 0 &&
		have.Spec.Flags&^model.FlagsWeManage == 0 && have.Equal(want):
		r.applied[key] = want
		r.shared[key] = true
	default:
		r.applied[key] = normalize(have)
		delete(r.shared, key)
	}
}

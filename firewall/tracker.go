package firewall

import (
	"slices"
	"sync"

	"github.com/kube-ipvs/kube-ipvs/model"
)

// Changes are set entries to add (true) or delete (false), per set. It is what
// ipset.Reconciler.Apply takes.
type Changes map[SetName]map[Entry]bool

func (c Changes) put(n SetName, e Entry, v bool) {
	if c[n] == nil {
		c[n] = map[Entry]bool{}
	}
	c[n][e] = v
}

// Tracker remembers the entries of every Service and how many Services want each entry, so
// that a Service change yields exactly the entries that appear in or vanish from the sets:
// an entry two Services share (an LB IP in KIPVS-VIPS, an endpoint behind two Services in
// KIPVS-LOOP-BACK) is added by the first and deleted by the last. It is pure bookkeeping,
// safe for concurrent use.
//
// It keeps entries packed (see Packed): a Service's as one sorted slice, the owner counts
// in one map per set. At 50,000 Services that is over half a million entries, which as
// nested maps of Entry took several times the memory and kept the garbage collector busy.
type Tracker struct {
	mu      sync.Mutex
	service map[model.ServiceName][]Member // sorted, without duplicates
	owners  map[SetID]map[Packed]int32
}

// NewTracker returns an empty Tracker.
func NewTracker() *Tracker {
	return &Tracker{service: map[model.ServiceName][]Member{}, owners: map[SetID]map[Packed]int32{}}
}

// UpdateMembers records the entries of the given Services now, each as the members
// AppendMembers gives (in any order, duplicates allowed; nil or empty when the Service is
// deleted or no longer proxied); the slices become the Tracker's. With withChanges it
// returns what the sets must gain (add, all true) and lose (del, all false): the net effect
// of all the Services together, so an entry that moves from one Service to another in the
// same call is neither added nor deleted, and unchanged Services yield empty Changes. Apply
// add before the IPVS changes and del after them, so no packet meets a virtual server whose
// set entries are missing.
//
// Without withChanges it only records (the Changes are nil): a repair follows, which
// compares everything anyway, and the cold start of a large cluster need not hold every
// entry twice.
func (t *Tracker) UpdateMembers(updates map[model.ServiceName][]Member, withChanges bool) (add, del Changes) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var before map[Member]bool // whether each touched entry was in its set
	touch := func(m Member) {
		if !withChanges {
			return
		}
		if before == nil {
			before = map[Member]bool{}
		}
		if _, seen := before[m]; !seen {
			before[m] = t.owners[m.Set][m.Entry] > 0
		}
	}
	inc := func(m Member) {
		touch(m)
		o := t.owners[m.Set]
		if o == nil {
			o = map[Packed]int32{}
			t.owners[m.Set] = o
		}
		o[m.Entry]++
	}
	dec := func(m Member) {
		touch(m)
		o := t.owners[m.Set]
		if o[m.Entry]--; o[m.Entry] <= 0 {
			delete(o, m.Entry)
			if len(o) == 0 {
				delete(t.owners, m.Set)
			}
		}
	}
	for name, now := range updates {
		now = slices.Clip(SortMembers(now))
		old := t.service[name]
		i, j := 0, 0
		for i < len(old) || j < len(now) {
			switch {
			case j == len(now) || (i < len(old) && compareMembers(old[i], now[j]) < 0):
				dec(old[i])
				i++
			case i == len(old) || compareMembers(old[i], now[j]) > 0:
				inc(now[j])
				j++
			default:
				i++
				j++
			}
		}
		if len(now) == 0 {
			delete(t.service, name)
		} else {
			t.service[name] = now
		}
	}
	if !withChanges {
		return nil, nil
	}
	add, del = Changes{}, Changes{}
	for m, was := range before {
		switch is := t.owners[m.Set][m.Entry] > 0; {
		case is && !was:
			add.put(m.Set.Name(), m.Entry.Entry(), true)
		case was && !is:
			del.put(m.Set.Name(), m.Entry.Entry(), false)
		}
	}
	return add, del
}

// SortMembers sorts members and drops repeats, in place: the form Same compares.
func SortMembers(ms []Member) []Member {
	slices.SortFunc(ms, compareMembers)
	return slices.CompactFunc(ms, func(a, b Member) bool { return a == b })
}

// Same reports whether the Service's recorded entries are exactly members (as SortMembers
// returns them): then an update would change nothing.
func (t *Tracker) Same(name model.ServiceName, members []Member) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Equal(t.service[name], members)
}

// Services returns the Services that have entries (a copy of their names).
func (t *Tracker) Services() map[model.ServiceName]bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[model.ServiceName]bool, len(t.service))
	for name := range t.service {
		out[name] = true
	}
	return out
}

// Count returns how many distinct entries the set holds.
func (t *Tracker) Count(n SetName) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.owners[IDOf(n)])
}

// Has reports whether some Service wants the entry in the set.
func (t *Tracker) Has(n SetName, p Packed) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.owners[IDOf(n)][p] > 0
}

// Range calls fn for every entry of the set, in no order, until fn returns false. fn must not
// call the Tracker.
func (t *Tracker) Range(n SetName, fn func(Packed) bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for p := range t.owners[IDOf(n)] {
		if !fn(p) {
			return
		}
	}
}

// Names returns the sets some Service has entries in.
func (t *Tracker) Names() []SetName {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]SetName, 0, len(t.owners))
	for id := range t.owners {
		out = append(out, id.Name())
	}
	return out
}

// DesiredSets is a read-only view of the entries each set must hold, as ipset Resync reads
// it. The Tracker is one; EntryMap makes one of a plain map.
type DesiredSets interface {
	// Names lists the sets with desired entries (a repair reports entries for a set that is
	// not defined).
	Names() []SetName
	Count(n SetName) int
	Has(n SetName, p Packed) bool
	Range(n SetName, fn func(Packed) bool)
}

// EntryMap is a DesiredSets over a map: the entries mapped to true.
type EntryMap map[SetName]map[Entry]bool

// Names returns the sets the map has entries for.
func (m EntryMap) Names() []SetName {
	out := make([]SetName, 0, len(m))
	for n := range m {
		out = append(out, n)
	}
	return out
}

func (m EntryMap) Count(n SetName) int {
	c := 0
	for _, ok := range m[n] {
		if ok {
			c++
		}
	}
	return c
}

func (m EntryMap) Has(n SetName, p Packed) bool { return m[n][p.Entry()] }

func (m EntryMap) Range(n SetName, fn func(Packed) bool) {
	for e, ok := range m[n] {
		if ok && !fn(e.Pack()) {
			return
		}
	}
}

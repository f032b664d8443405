package firewall

import (
	"sync"

	"github.com/kube-ipvs/kube-ipvs/model"
)

// Changes are set entries to add (true) or delete (false), per set. It is what
// ipset.Reconciler.Apply takes.
type Changes map[SetName]map[Entry]bool

// Len is the number of entries in c.
func (c Changes) Len() int {
	n := 0
	for _, m := range c {
		n += len(m)
	}
	return n
}

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
type Tracker struct {
	mu      sync.Mutex
	service map[model.ServiceName]map[SetName]map[Entry]bool
	owners  map[SetName]map[Entry]int
}

// NewTracker returns an empty Tracker.
func NewTracker() *Tracker {
	return &Tracker{service: map[model.ServiceName]map[SetName]map[Entry]bool{}, owners: map[SetName]map[Entry]int{}}
}

// Update records the Service's entries now (from ServiceEntries; nil or empty when it is
// deleted or no longer proxied) and returns what the sets must gain (Add, all true) and lose
// (Del, all false). A Service whose entries did not change yields two empty Changes.
//
// Apply Add before the IPVS changes and Del after them, so no packet meets a virtual server
// whose set entries are missing. For several Services in one sync use UpdateMany: an entry
// that moves from one Service to another must be neither added nor deleted, which merging
// the results of separate Updates would get wrong.
func (t *Tracker) Update(name model.ServiceName, entries map[SetName]map[Entry]bool) (add, del Changes) {
	return t.UpdateMany(map[model.ServiceName]map[SetName]map[Entry]bool{name: entries})
}

// UpdateMany is Update for several Services at once; the Changes are the net effect on
// the sets.
func (t *Tracker) UpdateMany(updates map[model.ServiceName]map[SetName]map[Entry]bool) (add, del Changes) {
	t.mu.Lock()
	defer t.mu.Unlock()
	before := map[SetName]map[Entry]bool{} // whether each touched entry was in its set
	touch := func(n SetName, e Entry) {
		if before[n] == nil {
			before[n] = map[Entry]bool{}
		}
		if _, seen := before[n][e]; !seen {
			before[n][e] = t.owners[n][e] > 0
		}
	}
	for name, entries := range updates {
		old := t.service[name]
		now := map[SetName]map[Entry]bool{}
		for n, m := range entries {
			for e, want := range m {
				if !want {
					continue
				}
				if now[n] == nil {
					now[n] = map[Entry]bool{}
				}
				now[n][e] = true
				if old[n][e] {
					continue
				}
				touch(n, e)
				if t.owners[n] == nil {
					t.owners[n] = map[Entry]int{}
				}
				t.owners[n][e]++
			}
		}
		for n, m := range old {
			for e := range m {
				if now[n][e] {
					continue
				}
				touch(n, e)
				if t.owners[n][e]--; t.owners[n][e] <= 0 {
					delete(t.owners[n], e)
					if len(t.owners[n]) == 0 {
						delete(t.owners, n)
					}
				}
			}
		}
		if len(now) == 0 {
			delete(t.service, name)
		} else {
			t.service[name] = now
		}
	}
	add, del = Changes{}, Changes{}
	for n, m := range before {
		for e, was := range m {
			switch is := t.owners[n][e] > 0; {
			case is && !was:
				add.put(n, e, true)
			case was && !is:
				del.put(n, e, false)
			}
		}
	}
	return add, del
}

// Desired returns every entry some Service wants, per set: the input of ipset Resync. Sets
// no Service uses are absent (Resync keeps every defined set, empty if need be).
func (t *Tracker) Desired() map[SetName]map[Entry]bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[SetName]map[Entry]bool, len(t.owners))
	for n, m := range t.owners {
		c := make(map[Entry]bool, len(m))
		for e := range m {
			c[e] = true
		}
		out[n] = c
	}
	return out
}

// Count returns how many distinct entries the set holds.
func (t *Tracker) Count(n SetName) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.owners[n])
}

package ipset

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/kube-ipvs/kube-ipvs/firewall"
	"github.com/kube-ipvs/kube-ipvs/internal/oplog"
)

// FakeKernel is an in-memory Kernel for tests. It answers as the kernel does (missing and
// existing sets, full sets, entries of the wrong kind, swaps only between sets of one type
// and family, no destroying a referenced set), logs every call as one line (TakeOps returns
// them), and can be told to fail.
type FakeKernel struct {
	oplog.Log
	mu   sync.Mutex
	sets map[firewall.SetName]*fakeSet

	// Fail, when set, is consulted before every call with the op name (the first word of
	// the logged line: list-headers, list, create, destroy, swap, add, del) and the set
	// name ("" for list-headers). A non-nil error is returned instead of doing the call;
	// the call is still logged. Fail must not call the fake.
	Fail func(op string, name firewall.SetName) error
}

type fakeSet struct {
	spec    Spec
	entries map[firewall.Entry]bool
	refs    uint32
}

// NewFakeKernel returns a fake with no sets.
func NewFakeKernel() *FakeKernel {
	return &FakeKernel{sets: map[firewall.SetName]*fakeSet{}}
}

// Put creates a set with entries directly, without logging a call.
func (f *FakeKernel) Put(s Spec, entries ...firewall.Entry) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fs := &fakeSet{spec: s, entries: map[firewall.Entry]bool{}}
	for _, e := range entries {
		fs.entries[e] = true
	}
	f.sets[s.Name] = fs
}

// Remove destroys a set directly, without logging a call (someone else's ipset -X).
func (f *FakeKernel) Remove(n firewall.SetName) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.sets, n)
}

// SetReferences sets how many iptables rules reference a set (such a set cannot be
// destroyed).
func (f *FakeKernel) SetReferences(n firewall.SetName, refs uint32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sets[n].refs = refs
}

// Names lists the sets, sorted.
func (f *FakeKernel) Names() []firewall.SetName {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Sorted(maps.Keys(f.sets))
}

// Get returns a set's spec and its entries rendered and sorted; ok is false when absent.
func (f *FakeKernel) Get(n firewall.SetName) (spec Spec, entries []string, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.sets[n]
	if !ok {
		return Spec{}, nil, false
	}
	for _, e := range sortedEntries(s.entries) {
		entries = append(entries, e.String())
	}
	return s.spec, entries, true
}

func (f *FakeKernel) call(op string, name firewall.SetName, line string) error {
	f.Record(strings.TrimSpace(op + " " + line))
	if f.Fail != nil {
		return f.Fail(op, name)
	}
	return nil
}

// ListHeaders implements Kernel.
func (f *FakeKernel) ListHeaders() ([]Header, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("list-headers", "", ""); err != nil {
		return nil, err
	}
	out := make([]Header, 0, len(f.sets))
	for _, s := range f.sets {
		out = append(out, Header{Spec: s.spec, Entries: uint32(len(s.entries)), References: s.refs})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// EachEntry implements Kernel: the entries in order, handed over after the lock is let go
// (fn may call the fake).
func (f *FakeKernel) EachEntry(n firewall.SetName, fn func(firewall.Entry)) error {
	f.mu.Lock()
	if err := f.call("list", n, string(n)); err != nil {
		f.mu.Unlock()
		return err
	}
	s, ok := f.sets[n]
	if !ok {
		f.mu.Unlock()
		return fmt.Errorf("list %s: %w", n, ErrSetNotFound)
	}
	es := sortedEntries(s.entries)
	f.mu.Unlock()
	for _, e := range es {
		fn(e)
	}
	return nil
}

// Create implements Kernel.
func (f *FakeKernel) Create(s Spec) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	line := fmt.Sprintf("%s %s %s", s.Name, s.Type, s.Family)
	if s.Type == firewall.BitmapPort {
		line += fmt.Sprintf(" range %d-%d", s.PortFrom, s.PortTo)
	} else {
		line += fmt.Sprintf(" hashsize %d maxelem %d", s.HashSize, s.MaxElem)
	}
	if s.SkbInfo {
		line += " skbinfo"
	}
	if err := f.call("create", s.Name, line); err != nil {
		return err
	}
	if _, ok := f.sets[s.Name]; ok {
		return fmt.Errorf("create %s: %w", s.Name, ErrSetExists)
	}
	f.sets[s.Name] = &fakeSet{spec: s, entries: map[firewall.Entry]bool{}}
	return nil
}

// Destroy implements Kernel.
func (f *FakeKernel) Destroy(n firewall.SetName) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("destroy", n, string(n)); err != nil {
		return err
	}
	s, ok := f.sets[n]
	switch {
	case !ok:
		return fmt.Errorf("destroy %s: %w", n, ErrSetNotFound)
	case s.refs > 0:
		return fmt.Errorf("destroy %s: %w", n, ErrSetInUse)
	}
	delete(f.sets, n)
	return nil
}

// Swap implements Kernel. References stay with the names, as in the kernel.
func (f *FakeKernel) Swap(a, b firewall.SetName) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("swap", a, string(a)+" "+string(b)); err != nil {
		return err
	}
	sa, oka := f.sets[a]
	sb, okb := f.sets[b]
	if !oka || !okb {
		return fmt.Errorf("swap %s %s: %w", a, b, ErrSetNotFound)
	}
	if sa.spec.Type != sb.spec.Type || sa.spec.Family != sb.spec.Family {
		return fmt.Errorf("swap %s %s: %w", a, b, ErrTypeMismatch)
	}
	sa.spec, sb.spec = sb.spec, sa.spec
	sa.spec.Name, sb.spec.Name = a, b
	sa.entries, sb.entries = sb.entries, sa.entries
	return nil
}

// Add implements Kernel: entries are added in order until one fails, as the kernel does.
func (f *FakeKernel) Add(n firewall.SetName, entries []firewall.Entry) error {
	return f.adt("add", n, entries, true)
}

// Del implements Kernel.
func (f *FakeKernel) Del(n firewall.SetName, entries []firewall.Entry) error {
	return f.adt("del", n, entries, false)
}

func (f *FakeKernel) adt(op string, n firewall.SetName, entries []firewall.Entry, add bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	strs := make([]string, len(entries))
	for i, e := range entries {
		strs[i] = e.String()
	}
	if err := f.call(op, n, string(n)+" "+strings.Join(strs, " ")); err != nil {
		return err
	}
	s, ok := f.sets[n]
	if !ok {
		return fmt.Errorf("%s %s: %w", op, n, ErrSetNotFound)
	}
	def := firewall.SetDef{Name: n, Type: s.spec.Type, Family: s.spec.Family, PortFrom: s.spec.PortFrom, PortTo: s.spec.PortTo, SkbInfo: s.spec.SkbInfo}
	for _, e := range entries {
		if err := def.Check(e); err != nil {
			return fmt.Errorf("%s %s: %w", op, n, err)
		}
		// As the kernel, key an entry without its mark: adding overwrites the mark of the
		// entry there, deleting deletes it whatever its mark.
		old, had := s.find(e)
		if !add {
			delete(s.entries, old)
			continue
		}
		if had {
			delete(s.entries, old)
			s.entries[e] = true
			continue
		}
		if s.spec.Type != firewall.BitmapPort && len(s.entries) >= int(s.spec.MaxElem) {
			return fmt.Errorf("add %s to %s: %w", e, n, ErrSetFull)
		}
		s.entries[e] = true
	}
	return nil
}

// find returns the entry with e's key (e without its mark) and whether there is one.
func (s *fakeSet) find(e firewall.Entry) (firewall.Entry, bool) {
	if s.entries[e] || e.Mark == 0 && !s.spec.SkbInfo {
		return e, s.entries[e]
	}
	key := e
	key.Mark = 0
	for have := range s.entries {
		h := have
		h.Mark = 0
		if h == key {
			return have, true
		}
	}
	return e, false
}

// sortedEntries returns the entries mapped to true, in firewall.EntryLess order.
func sortedEntries(m map[firewall.Entry]bool) []firewall.Entry {
	out := make([]firewall.Entry, 0, len(m))
	for e, ok := range m {
		if ok {
			out = append(out, e)
		}
	}
	sort.Slice(out, func(i, j int) bool { return firewall.EntryLess(out[i], out[j]) })
	return out
}

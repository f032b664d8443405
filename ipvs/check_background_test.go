package ipvs

import (
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/kube-ipvs/kube-ipvs/model"
)

// heldLister is a Reconciler's Lister whose listing is taken when the check begins and
// handed over only when the test releases it: the changes the test applies in between
// land while the listing is "in flight", as Apply does beside a real background dump.
// omit drops keys from the listing, as a dump that a deletion shifted would.
type heldLister struct {
	f       *FakeKernel
	omit    map[model.VSKey]bool
	taken   chan struct{}
	release chan struct{}
}

func newHeldLister(f *FakeKernel, omit ...model.VSKey) *heldLister {
	h := &heldLister{f: f, omit: map[model.VSKey]bool{}, taken: make(chan struct{}), release: make(chan struct{})}
	for _, k := range omit {
		h.omit[k] = true
	}
	return h
}

func (h *heldLister) ListServices() (map[model.VSKey]model.VSSpec, error) {
	specs, err := h.f.ListServices()
	for k := range h.omit {
		delete(specs, k)
	}
	close(h.taken)
	<-h.release
	return specs, err
}

// The listing runs beside the changes: the steps before it is in read and write nothing;
// changes applied while it is in flight are not reverted (a spec changed back, a deleted
// virtual server re-created); a virtual server the listing missed is read again rather than
// re-created; and real drift is still repaired, with exactly the writes it needs.
func TestCheckListsInTheBackgroundBesideChanges(t *testing.T) {
	f := NewFakeKernel()
	r := NewReconciler(f)
	desired := changes(vs(kA, "rr", "10.0.0.1:80", 1), vs(kB, "rr", "10.0.0.2:53", 1), vs(kC, "rr", "10.0.0.3:443", 1), vs(kD, "rr", "10.0.0.4:80", 1))
	r.Apply(maps.Clone(desired))
	f.Put(vs(kC, "rr")) // drift: kC lost its real server behind the reconciler's back
	h := newHeldLister(f, kD)
	r.Lister = h
	f.TakeOps()

	c, err := r.BeginCheck(keysOf(desired))
	if err != nil {
		t.Fatal(err)
	}
	<-h.taken // the kernel has been listed; the listing is not handed over yet
	if c.Listed() {
		t.Fatal("Listed before the listing was handed over")
	}
	if res, done := c.Step(10, lookup(desired), ownAll); done || res.Writes != 0 {
		t.Fatalf("a step before the listing: done %v, %d writes; want not done, none", done, res.Writes)
	}
	f.TakeOps()
	// The changes while the listing is in flight: kA's scheduler, kB deleted.
	late := changes(withSpec(desired[kA], model.VSSpec{Scheduler: "wrr"}))
	late[kB] = nil
	if res := r.Apply(maps.Clone(late)); res.Writes != 2 || len(res.Errors) > 0 {
		t.Fatalf("the change: %d writes, errors %v; want 2, none", res.Writes, res.Errors)
	}
	desired[kA] = late[kA]
	delete(desired, kB)
	f.TakeOps()

	close(h.release)
	for done := false; !done; {
		var res Result
		res, done = c.Step(10, lookup(desired), ownAll)
		if len(res.Errors) > 0 || res.Err != nil {
			t.Fatalf("step: %v %v", res.Err, res.Errors)
		}
	}
	ops := f.TakeOps()
	if w := writesIn(ops); len(w) != 1 || !strings.HasPrefix(w[0], "new-dest") || !strings.Contains(w[0], "10.0.0.3:443") {
		t.Fatalf("the check wrote %q; want only kC's lost real server back", w)
	}
	gotD := false
	for _, op := range ops {
		gotD = gotD || op == "get-spec "+kD.String()
	}
	if !gotD {
		t.Errorf("kD, missing from the listing, was not read again: %q", ops)
	}
	expectKernel(t, f, desired)
}

// A step ends early when the caller says a change waits: after one virtual server, however
// large the budget.
func TestCheckStepYieldsToAWaitingChange(t *testing.T) {
	f := NewFakeKernel()
	r := NewReconciler(f)
	desired := changes(vs(kA, "rr", "10.0.0.1:80", 1), vs(kB, "rr", "10.0.0.2:53", 1), vs(kC, "rr", "10.0.0.3:443", 1))
	r.Apply(maps.Clone(desired))
	c, err := r.BeginCheck(keysOf(desired))
	if err != nil {
		t.Fatal(err)
	}
	f.TakeOps()
	yields := 0
	waiting := func() bool { yields++; return true }
	steps := 0
	for done := false; !done; steps++ {
		_, done = c.StepUntil(10, time.Time{}, waiting, lookup(desired), ownAll)
	}
	if steps != 3 {
		t.Errorf("%d steps for 3 virtual servers with a change always waiting, want 3", steps)
	}
	if yields == 0 {
		t.Error("the step never asked whether a change waits")
	}
	c, err = r.BeginCheck(keysOf(desired))
	if err != nil {
		t.Fatal(err)
	}
	if _, done := c.StepUntil(10, time.Time{}, func() bool { return false }, lookup(desired), ownAll); !done {
		t.Error("with no change waiting, one step of budget 10 did not check all 3")
	}
}

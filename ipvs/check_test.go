package ipvs

import (
	"iter"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kube-ipvs/kube-ipvs/model"
)

// keysOf yields the keys of a desired map, as BeginCheck takes them.
// keysOf is BeginCheck's desired keys: a copy, as the controller gives (the check walks it
// in the background while the test changes m).
func keysOf(m map[model.VSKey]*model.VirtualServer) iter.Seq[model.VSKey] {
	return maps.Keys(maps.Clone(m))
}

func lookup(m map[model.VSKey]*model.VirtualServer) func(model.VSKey) *model.VirtualServer {
	return func(k model.VSKey) *model.VirtualServer { return m[k] }
}

func ownAll(model.VSKey) bool { return true }

// writesIn counts the write calls among a fake kernel's logged lines.
func writesIn(ops []string) []string {
	var out []string
	for _, op := range ops {
		if !strings.HasPrefix(op, "list") && !strings.HasPrefix(op, "get") {
			out = append(out, op)
		}
	}
	return out
}

// expectKernel fails the test unless the fake kernel holds exactly desired.
func expectKernel(t *testing.T, f *FakeKernel, desired map[model.VSKey]*model.VirtualServer) {
	t.Helper()
	expectDump(t, f, slices.Collect(maps.Values(desired))...)
}

// checkSurvivesLateChanges applies changes after check c began (a spec changed, a virtual
// server added, one deleted), as the sync loop does between the check's steps, then runs c
// to its end in steps of budget: c must write nothing for them (no write reaches the
// kernel), and desired becomes what the kernel must hold.
func checkSurvivesLateChanges(t *testing.T, r *Reconciler, f *FakeKernel, c *Check, desired map[model.VSKey]*model.VirtualServer, budget int) {
	t.Helper()
	late := changes(withSpec(desired[kA], model.VSSpec{Scheduler: "wrr"}), vs(kC, "rr", "10.0.0.3:443", 1))
	late[kD] = nil
	if res := r.Apply(maps.Clone(late)); res.Writes != 4 || len(res.Errors) > 0 {
		t.Fatalf("the change: %d writes, errors %v; want 4, none", res.Writes, res.Errors)
	}
	desired[kA], desired[kC] = late[kA], late[kC]
	delete(desired, kD)
	f.TakeOps()
	for done := false; !done; {
		var res Result
		res, done = c.Step(budget, lookup(desired), ownAll)
		if res.Writes != 0 || len(res.Errors) > 0 {
			t.Fatalf("the check wrote %d times (errors %v) for virtual servers changed after it began", res.Writes, res.Errors)
		}
	}
	if w := writesIn(f.TakeOps()); len(w) > 0 {
		t.Fatalf("the check wrote %q", w)
	}
}

func TestCheckRepairsOnlyDriftInBoundedSteps(t *testing.T) {
	f := NewFakeKernel()
	r := NewReconciler(f)
	desired := changes(vs(kA, "rr", "10.0.0.1:80", 1), vs(kB, "rr", "10.0.0.2:53", 1), vs(kC, "rr", "10.0.0.3:443", 1))
	r.Apply(maps.Clone(desired))
	// Drift behind the reconciler's back: a real server of kA lost, kB deleted, kD added.
	f.Put(vs(kA, "rr"))
	f.Drop(kB)
	f.Put(vs(kD, "rr", "10.0.0.4:80", 1))
	f.TakeOps()

	c, err := r.BeginCheck(keysOf(desired))
	if err != nil {
		t.Fatal(err)
	}
	expectOps(t, f, "list-services")
	steps := 0
	for done := false; !done; steps++ {
		var res Result
		res, done = c.Step(1, lookup(desired), ownAll)
		if len(res.Errors) > 0 {
			t.Fatalf("step %d: %v", steps, res.Errors)
		}
		reads := 0
		for _, op := range f.TakeOps() {
			if strings.HasPrefix(op, "get") {
				reads++
			}
		}
		if reads > 2 {
			t.Fatalf("step %d read %d times with a budget of one virtual server", steps, reads)
		}
	}
	if steps != 4 {
		t.Fatalf("%d steps for 4 virtual servers with a budget of 1, want 4", steps)
	}
	expectKernel(t, f, desired)

	// A second check of a kernel that matches writes nothing.
	c, err = r.BeginCheck(keysOf(desired))
	if err != nil {
		t.Fatal(err)
	}
	for done := false; !done; {
		_, done = c.Step(2, lookup(desired), ownAll)
	}
	if w := writesIn(f.TakeOps()); len(w) > 0 {
		t.Fatalf("a check of a matching kernel wrote %q", w)
	}
}

// TestCheckNeverRevertsAChangeMadeAfterItsListing forces the race a stepped repair has: the
// check lists the table, then changes are applied (as the sync loop does between steps),
// then the check reaches those virtual servers. Each change must survive, and the check
// must write nothing for them: judged by its old listing it would re-create a virtual
// server that now exists, put a spec back, or delete again one that is gone.
func TestCheckNeverRevertsAChangeMadeAfterItsListing(t *testing.T) {
	f := NewFakeKernel()
	r := NewReconciler(f)
	desired := changes(vs(kA, "rr", "10.0.0.1:80", 1), vs(kD, "rr", "10.0.0.4:80", 1))
	r.Apply(maps.Clone(desired))
	f.TakeOps()

	c, err := r.BeginCheck(keysOf(desired))
	if err != nil {
		t.Fatal(err)
	}
	checkSurvivesLateChanges(t, r, f, c, desired, 10)
	expectKernel(t, f, desired)
}

// A change between the listing and the step that makes a virtual server right is seen as
// such; drift on another one listed at the same time is still repaired.
func TestCheckRepairsDriftBesideAChange(t *testing.T) {
	f := NewFakeKernel()
	r := NewReconciler(f)
	desired := changes(vs(kA, "rr", "10.0.0.1:80", 1), vs(kB, "rr", "10.0.0.2:53", 1))
	r.Apply(maps.Clone(desired))
	f.Put(vs(kB, "rr")) // drift: kB lost its real server
	c, err := r.BeginCheck(keysOf(desired))
	if err != nil {
		t.Fatal(err)
	}
	desired[kA] = vs(kA, "rr", "10.0.0.1:80", 1, "10.0.0.9:80", 1)
	r.Apply(changes(desired[kA]))
	f.TakeOps()
	for done := false; !done; {
		_, done = c.Step(1, lookup(desired), ownAll)
	}
	if w := writesIn(f.TakeOps()); len(w) != 1 || !strings.HasPrefix(w[0], "new-dest") || !strings.Contains(w[0], "10.0.0.2:53") {
		t.Fatalf("check wrote %q, want only kB's lost real server back", w)
	}
}

// A step also ends when its time is up, after one virtual server at least: with the time
// already past, a budget of 10 checks one a step; with none, all of them in one.
func TestCheckStepEndsWhenItsTimeIsUp(t *testing.T) {
	f := NewFakeKernel()
	r := NewReconciler(f)
	desired := changes(vs(kA, "rr", "10.0.0.1:80", 1), vs(kB, "rr", "10.0.0.2:53", 1), vs(kC, "rr", "10.0.0.3:443", 1))
	r.Apply(maps.Clone(desired))
	for _, tc := range []struct {
		until time.Time
		steps int
	}{{time.Now().Add(-time.Second), 3}, {time.Time{}, 1}} {
		c, err := r.BeginCheck(keysOf(desired))
		if err != nil {
			t.Fatal(err)
		}
		steps := 0
		for done := false; !done; steps++ {
			_, done = c.StepUntil(10, tc.until, nil, lookup(desired), ownAll)
		}
		if steps != tc.steps {
			t.Errorf("until %v: %d steps, want %d", tc.until, steps, tc.steps)
		}
	}
}

// Every virtual server a check reads goes into the same map (Check.reals), so what adopt
// keeps must be a copy: kA's drift is judged after kB and kC were read into that map too,
// in the same step, and must still be repaired as kA's (with the read map kept as kA's
// cache, kA would hold kC's real server by the time the step writes).
func TestCheckKeepsNoReadMapAcrossVirtualServers(t *testing.T) {
	for _, share := range []bool{false, true} {
		f := NewFakeKernel()
		r := NewReconciler(f)
		if share {
			r.ShareDesired()
		}
		desired := changes(vs(kA, "rr", "10.0.0.1:80", 1), vs(kB, "rr", "10.0.0.2:53", 1), vs(kC, "rr", "10.0.0.3:443", 1))
		r.Apply(maps.Clone(desired))
		f.Put(vs(kA, "rr", "10.0.0.1:80", 3)) // drift: a weight changed behind the proxy's back
		f.TakeOps()
		c, err := r.BeginCheck(keysOf(desired))
		if err != nil {
			t.Fatal(err)
		}
		for done := false; !done; {
			_, done = c.Step(10, lookup(desired), ownAll)
		}
		if w := writesIn(f.TakeOps()); len(w) != 1 || !strings.HasPrefix(w[0], "update-dest") || !strings.Contains(w[0], "10.0.0.1:80") {
			t.Fatalf("share %v: check wrote %q, want only kA's weight put back", share, w)
		}
		expectKernel(t, f, desired)
		if res := r.Apply(maps.Clone(desired)); res.Writes != 0 {
			t.Fatalf("share %v: applying what the check left wrote %d times: its cache is not the kernel", share, res.Writes)
		}
	}
}

// resync is a whole repair: the check begun by BeginWholeCheck, in one step as large as
// everything.
func resync(r *Reconciler, desired map[model.VSKey]*model.VirtualServer, owned func(model.VSKey) bool) Result {
	c, err := r.BeginWholeCheck(desired)
	if err != nil {
		return Result{Err: err}
	}
	res, _ := c.Step(c.Left(), func(k model.VSKey) *model.VirtualServer { return desired[k] }, owned)
	return res
}

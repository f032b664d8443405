package ipvs

import (
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kube-ipvs/kube-ipvs/model"
)

// opsWith returns the logged calls that start with prefix.
func opsWith(ops []string, prefix string) []string {
	var out []string
	for _, op := range ops {
		if strings.HasPrefix(op, prefix) {
			out = append(out, op)
		}
	}
	return out
}

// runCheck begins a check at now and steps it to its end; it returns whether it listed the
// table and the kernel calls it made.
func runCheck(t *testing.T, r *Reconciler, f *FakeKernel, desired map[model.VSKey]*model.VirtualServer) (listed bool, ops []string) {
	t.Helper()
	f.TakeOps()
	c, err := r.BeginCheck(keysOf(desired))
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); !c.Listed(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the background listing never came in")
		}
	}
	for done, steps := false, 0; !done; steps++ {
		if steps > 1000 {
			t.Fatal("the check never ended")
		}
		var res Result
		res, done = c.Step(2, lookup(desired), ownAll)
		if res.Err != nil || len(res.Errors) > 0 {
			t.Fatalf("check step: %v %v", res.Err, res.Errors)
		}
	}
	return c.ListsTable(), f.TakeOps()
}

// A check lists the whole table only when the last listing is at least listingSpacing
// times its own length ago; in between it reads what the proxy knows of by key and
// repairs all of that (a spec changed, a virtual server deleted, a real server lost, a
// real server added by someone else), writing only what drifted, but cannot see a stray on
// an owned address, which the next check that lists the table deletes. Both with the
// listing taken in the call and in the background (a Lister).
func TestCheckListsTheTableOnlyAsOftenAsItsLengthAllows(t *testing.T) {
	for _, background := range []bool{false, true} {
		name := "in the call"
		if background {
			name = "in the background"
		}
		t.Run(name, func(t *testing.T) {
			f := NewFakeKernel()
			r := NewReconciler(f)
			if background {
				r.Lister = f
			}
			clock := newListingClock(f, time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC))
			r.now = clock.now
			desired := changes(vs(kA, "rr", "10.0.0.1:80", 1), vs(kB, "rr", "10.0.0.2:53", 1),
				vs(kC, "rr", "10.0.0.3:443", 1), vs(kD, "rr", "10.0.0.4:80", 1))
			clock.listingTakes(time.Second) // the spacing is then 200 s
			if res := resync(r, maps.Clone(desired), ownAll); res.Err != nil || len(res.Errors) > 0 {
				t.Fatalf("resync: %v %v", res.Err, res.Errors)
			}
			if next, took := r.NextListing(); took != time.Second || !next.Equal(clock.now().Add(200*time.Second)) {
				t.Fatalf("after the resync's listing: next listing %v after %v, want 200 s after a 1 s listing", next.Sub(clock.now()), took)
			}

			// Drift behind the reconciler's back, and a stray.
			f.Put(withSpec(desired[kA], model.VSSpec{Scheduler: "sh"}))
			f.Drop(kB)
			f.Put(vs(kC, "rr"))
			f.Put(vs(kD, "rr", "10.0.0.4:80", 1, "10.0.0.66:80", 1))
			stray := key("10.96.0.9:8080", model.TCP)
			f.Put(vs(stray, "rr", "10.0.0.9:80", 1))

			clock.add(199 * time.Second)
			listed, ops := runCheck(t, r, f, desired)
			if listed || len(opsWith(ops, "list")) > 0 {
				t.Fatalf("199 s after a 1 s listing the check listed the table: %q", ops)
			}
			if got := len(opsWith(ops, "get-spec")); got != len(desired) {
				t.Errorf("%d virtual servers read by key, want %d: %q", got, len(desired), ops)
			}
			w := writesIn(ops)
			if len(w) != 5 {
				t.Errorf("the check wrote %q; want kA's spec, kB and its real server, kC's real server, kD's extra one gone: 5 writes", w)
			}
			want := maps.Clone(desired)
			want[stray] = vs(stray, "rr", "10.0.0.9:80", 1)
			expectKernel(t, f, want)

			// A second keyed check of a kernel that matches writes nothing.
			clock.add(time.Second / 2)
			if listed, ops := runCheck(t, r, f, desired); listed || len(writesIn(ops)) > 0 {
				t.Fatalf("a second check between listings: listed %v, wrote %q", listed, writesIn(ops))
			}

			// 200 s after the listing, the check lists the table and deletes the stray.
			clock.add(time.Second / 2)
			listed, ops = runCheck(t, r, f, desired)
			if !listed || len(opsWith(ops, "list-services")) != 1 {
				t.Fatalf("200 s after a 1 s listing the check did not list the table: %q", ops)
			}
			if w := writesIn(ops); len(w) != 1 || !strings.HasPrefix(w[0], "del-service TCP 10.96.0.9:8080") {
				t.Errorf("the listing check wrote %q, want the stray deleted alone", w)
			}
			expectKernel(t, f, desired)

			// A table that lists in 20 ms is listed by a check 4 s later, not 3 s later; one
			// that lists in under 10 ms (minRationedListing) by every check.
			clock.listingTakes(20 * time.Millisecond)
			clock.add(200 * time.Second)
			if listed, ops := runCheck(t, r, f, desired); !listed {
				t.Fatalf("400 s after a 1 s listing the check did not list the table: %q", ops)
			}
			clock.add(3 * time.Second)
			if listed, ops := runCheck(t, r, f, desired); listed {
				t.Fatalf("3 s after a 20 ms listing the check listed the table: %q", ops)
			}
			clock.add(time.Second)
			clock.listingTakes(5 * time.Millisecond) // from this listing on
			if listed, ops := runCheck(t, r, f, desired); !listed {
				t.Fatalf("4 s after a 20 ms listing the check did not list the table: %q", ops)
			}
			for range 2 {
				if listed, ops := runCheck(t, r, f, desired); !listed {
					t.Fatalf("right after a 5 ms listing the check did not list the table: %q", ops)
				}
			}
		})
	}
}

// A keyed check reads each virtual server at its step, under the reconciler's lock: a change
// applied after the check began is never reverted, and the check writes nothing for it.
func TestKeyedCheckNeverRevertsAChangeMadeAfterItBegan(t *testing.T) {
	f := NewFakeKernel()
	r := NewReconciler(f)
	desired := changes(vs(kA, "rr", "10.0.0.1:80", 1), vs(kD, "rr", "10.0.0.4:80", 1))
	clock := newListingClock(f, time.Now())
	r.now = clock.now
	clock.listingTakes(time.Hour)
	if res := resync(r, maps.Clone(desired), ownAll); res.Err != nil {
		t.Fatal(res.Err)
	}
	f.TakeOps()
	c, err := r.BeginCheck(keysOf(desired))
	if err != nil {
		t.Fatal(err)
	}
	if c.ListsTable() {
		t.Fatal("the check lists the table right after a listing of an hour")
	}
	checkSurvivesLateChanges(t, r, f, c, desired, 1)
	expectKernel(t, f, desired)
}

// listingClock is a test's clock that a listing of the fake's table moves on by what the
// test says a listing takes: the reconciler times its listings by its clock.
type listingClock struct {
	mu   sync.Mutex
	t    time.Time
	each time.Duration
}

func newListingClock(f *FakeKernel, t time.Time) *listingClock {
	c := &listingClock{t: t}
	f.Fail = func(op string, _ model.VSKey) error {
		if op == "list-services" {
			c.mu.Lock()
			c.t = c.t.Add(c.each)
			c.mu.Unlock()
		}
		return nil
	}
	return c
}

func (c *listingClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *listingClock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func (c *listingClock) listingTakes(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.each = d
}

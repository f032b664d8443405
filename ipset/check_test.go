package ipset

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kube-ipvs/kube-ipvs/firewall"
	"github.com/kube-ipvs/kube-ipvs/model"
)

// stalledLister lists through the fake, then holds the listing until released: the proxy's
// changes land between the kernel's answer and the comparison, as they do when a large set
// is listed in the background.
type stalledLister struct {
	*FakeKernel
	listed, release chan struct{}
}

func (s stalledLister) EachEntry(n firewall.SetName, fn func(firewall.Entry)) error {
	es, err := stall[[]firewall.Entry](s.listed, s.release)(ListEntries(s.FakeKernel, n))
	for _, e := range es {
		fn(e)
	}
	return err
}

// stall returns a function that passes a listing's answer on once the test released it.
func stall[T any](listed, release chan struct{}) func(T, error) (T, error) {
	return func(v T, err error) (T, error) {
		listed <- struct{}{}
		<-release
		return v, err
	}
}

// A stepped check lists in the background while changes are applied: it repairs the drift it
// found, never re-writes (or reverts) what a change wrote meanwhile, and leaves the cache true,
// so a later change is applied to the kernel. Without the record of what changed during the
// listing, the check deletes the entry a change removed again, adds back the one a change
// added, and forgets the latter in its cache, so deleting it later never reaches the kernel.
func TestCheckBesideChangesRepairsOnlyTheDrift(t *testing.T) {
	f := NewFakeKernel()
	tr := firewall.NewTracker()
	svc := model.ServiceName{Namespace: "ns", Name: "web"}
	a, b, c, x := ipp("10.0.0.1", 80), ipp("10.0.0.2", 80), ipp("10.0.0.3", 80), ipp("10.0.0.9", 80)
	tr.UpdateMembers(map[model.ServiceName][]firewall.Member{svc: members(defIPPort.Name, a, defIPPort.Name, b)}, false)
	r := New(f)
	checkRes(t, r.ResyncSets([]firewall.SetDef{defIPPort}, tr), 2)

	// Drift behind the proxy's back: b deleted, x added.
	spec, _ := r.Spec(defIPPort.Name)
	f.Put(spec, a, x)
	lister := stalledLister{f, make(chan struct{}, 8), make(chan struct{})}
	r.Lister = lister
	f.TakeOps()

	check, res := r.BeginCheck([]firewall.SetDef{defIPPort}, tr)
	checkRes(t, res, 0)
	checkRes(t, headersJudged(t, check), 0)
	<-lister.listed // the kernel answered {a, x}
	// Changes meanwhile: a removed, c added.
	add, del := tr.UpdateMembers(map[model.ServiceName][]firewall.Member{svc: members(defIPPort.Name, b, defIPPort.Name, c)}, true)
	if add[defIPPort.Name][c] != true || len(del[defIPPort.Name]) != 1 {
		t.Fatalf("tracker changes %v %v", add, del)
	}
	add[defIPPort.Name] = map[firewall.Entry]bool{b: true, c: true} // b is in the desired state already
	delete(add[defIPPort.Name], b)
	checkRes(t, r.Apply(add), 1)
	checkRes(t, r.Apply(del), 1)
	checkOps(t, f, "list-headers", "list KIPVS-CLUSTER-IP", "add KIPVS-CLUSTER-IP 10.0.0.3,tcp:80", "del KIPVS-CLUSTER-IP 10.0.0.1,tcp:80")

	if res, done, _ := check.StepNow(); done || res.Writes != 0 {
		t.Fatalf("a step before the listing is in: done %v, %d writes", done, res.Writes)
	}
	close(lister.release)
	total := stepUntilDone(t, check)
	// Only the drift: b back, x gone; a stays deleted and c stays, untouched.
	checkOps(t, f, "add KIPVS-CLUSTER-IP 10.0.0.2,tcp:80", "del KIPVS-CLUSTER-IP 10.0.0.9,tcp:80")
	if total.Writes != 2 {
		t.Errorf("the check wrote %d times, want 2", total.Writes)
	}
	checkSet(t, f, defIPPort.Name, "10.0.0.2,tcp:80", "10.0.0.3,tcp:80")

	// The cache is the kernel's: removing c reaches the kernel, and a full repair finds nothing.
	checkRes(t, r.Apply(changes(false, defIPPort.Name, c)), 1)
	checkSet(t, f, defIPPort.Name, "10.0.0.2,tcp:80")
	tr.UpdateMembers(map[model.ServiceName][]firewall.Member{svc: members(defIPPort.Name, b)}, false)
	f.TakeOps()
	checkRes(t, r.ResyncSets([]firewall.SetDef{defIPPort}, tr), 0)
}

// stepUntilDone steps check until it is done and returns its writes; errors fail the test.
func stepUntilDone(t *testing.T, check *SetsCheck) Result {
	t.Helper()
	var total Result
	deadline := time.Now().Add(10 * time.Second)
	for {
		res, done, _ := check.StepNow()
		total.Writes += res.Writes
		if len(res.Errors) > 0 || res.Err != nil {
			t.Fatalf("check errors %v %v", res.Err, res.Errors)
		}
		if done {
			return total
		}
		if time.Now().After(deadline) {
			t.Fatal("the check never finished")
		}
		time.Sleep(time.Millisecond) // the listing comes in the background
	}
}

// streamStalledLister hands a set's entries over one by one, in address order, as the
// netlink listing does a datagram at a time, and holds the rest of the listing after the
// first `after` entries until released: changes land while some entries were compared and
// others not yet.
type streamStalledLister struct {
	*FakeKernel
	after           int
	listed, release chan struct{}
}

func (s streamStalledLister) EachEntry(n firewall.SetName, fn func(firewall.Entry)) error {
	es, err := ListEntries(s.FakeKernel, n)
	if err != nil {
		return err
	}
	slices.SortFunc(es, func(a, b firewall.Entry) int { return a.IP.Compare(b.IP) })
	for i, e := range es {
		if i == s.after {
			s.listed <- struct{}{}
			<-s.release
		}
		fn(e)
	}
	return nil
}

// The listing is compared with the cache and the desired state as it streams in, keeping
// no copy of it. Changes that land in the middle touch one entry already compared and one
// compared after the change: neither may be written again or reverted by the check, nor
// hide the drift elsewhere in the set, and the cache must end as the kernel's. Without
// taking back what was counted for the entry removed after its comparison, the counts say
// every cached entry was listed, and the one that drifted away is never put back; without
// it for the one compared after, the check removes it again.
func TestCheckComparesAStreamedListingBesideChanges(t *testing.T) {
	const n = 3 * compareListBatch / 2 // the changes land after one batch was compared
	f := NewFakeKernel()
	tr := firewall.NewTracker()
	svc := model.ServiceName{Namespace: "ns", Name: "big"}
	entry := func(i int) firewall.Entry { return ipp(fmt.Sprintf("10.1.%d.%d", i/250, i%250+1), 80) }
	var ms []any
	for i := range n {
		ms = append(ms, defIPPort.Name, entry(i))
	}
	tr.UpdateMembers(map[model.ServiceName][]firewall.Member{svc: members(ms...)}, false)
	r := New(f)
	if res := r.ResyncSets([]firewall.SetDef{defIPPort}, tr); res.Err != nil || len(res.Errors) > 0 {
		t.Fatalf("ResyncSets: %+v", res)
	}
	// Drift behind the proxy's back: one entry gone, a stray one added.
	stray := ipp("10.9.0.1", 80)
	checkRes(t, Result{Err: f.Del(defIPPort.Name, []firewall.Entry{entry(n - 10)})}, 0)
	checkRes(t, Result{Err: f.Add(defIPPort.Name, []firewall.Entry{stray})}, 0)
	lister := streamStalledLister{f, compareListBatch + 8, make(chan struct{}, 1), make(chan struct{})}
	r.Lister = lister
	f.TakeOps()

	check, res := r.BeginCheck([]firewall.SetDef{defIPPort}, tr)
	checkRes(t, res, 0)
	checkRes(t, headersJudged(t, check), 0)
	<-lister.listed // one batch compared, the rest not yet
	// Changes meanwhile: entry 5 (compared) and entry n-5 (not yet) removed, a new one added.
	added := ipp("10.0.0.1", 80)
	next := []any{defIPPort.Name, added}
	for i := range n {
		if i != 5 && i != n-5 {
			next = append(next, defIPPort.Name, entry(i))
		}
	}
	add, del := tr.UpdateMembers(map[model.ServiceName][]firewall.Member{svc: members(next...)}, true)
	checkRes(t, r.Apply(add), 1)
	checkRes(t, r.Apply(del), 1)
	f.TakeOps()

	close(lister.release)
	total := stepUntilDone(t, check)
	ops := f.TakeOps()
	if total.Writes != 2 {
		t.Errorf("the check wrote %d times (%q), want 2: the lost entry back, the stray one out", total.Writes, ops)
	}
	for _, op := range ops {
		for _, e := range []firewall.Entry{entry(5), entry(n - 5), added} {
			if strings.Contains(op, e.String()+" ") || strings.HasSuffix(op, e.String()) {
				t.Errorf("the check wrote %q, which a change wrote meanwhile", op)
			}
		}
	}
	// The kernel holds the desired state exactly (the differences, if not).
	desired := map[string]bool{}
	tr.Range(defIPPort.Name, func(p firewall.Packed) bool { desired[p.Entry().String()] = true; return true })
	_, got, _ := f.Get(defIPPort.Name)
	for _, e := range got {
		if !desired[e] {
			t.Errorf("the kernel holds %s, not desired", e)
		}
		delete(desired, e)
	}
	for e := range desired {
		t.Errorf("the kernel lacks %s", e)
	}

	// The cache is the kernel's: a change reaches the kernel, and a full repair finds nothing.
	checkRes(t, r.Apply(changes(false, defIPPort.Name, added)), 1)
	tr.UpdateMembers(map[model.ServiceName][]firewall.Member{svc: members(next[2:]...)}, false)
	f.TakeOps()
	checkRes(t, r.ResyncSets([]firewall.SetDef{defIPPort}, tr), 0)
}

// headersJudged steps check until its background listing of the headers is in and judged,
// and returns that step's Result.
func headersJudged(t *testing.T, check *SetsCheck) Result {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		res, _, finished := check.StepNow()
		if finished > 0 {
			return res
		}
		if time.Now().After(deadline) {
			t.Fatal("the headers' listing never came in")
		}
		time.Sleep(time.Millisecond)
	}
}

// fullSet is a Reconciler that adopted a set at its maximum (1 entry, a): the next entry
// (b) makes it outgrow it.
func fullSet(t *testing.T) (*FakeKernel, *firewall.Tracker, *Reconciler, model.ServiceName, firewall.Entry, firewall.Entry) {
	t.Helper()
	f := NewFakeKernel()
	tr := firewall.NewTracker()
	svc := model.ServiceName{Namespace: "ns", Name: "web"}
	a, b := ipp("10.0.0.1", 80), ipp("10.0.0.2", 80)
	tr.UpdateMembers(map[model.ServiceName][]firewall.Member{svc: members(defIPPort.Name, a)}, false)
	f.Put(Spec{Name: defIPPort.Name, Type: firewall.HashIPPort, Family: firewall.IPv4, HashSize: 64, MaxElem: 1}, a)
	r := New(f)
	checkRes(t, r.ResyncSets([]firewall.SetDef{defIPPort}, tr), 0) // adopted: the cache is filled
	return f, tr, r, svc, a, b
}

// A set rebuilt while it was listed (a change made it outgrow its maximum) is not judged by
// the old listing; a set missing from the headers is created at once; a check without a
// second socket lists in BeginCheck and finishes in one step.
func TestCheckSkipsARebuiltSetAndCreatesMissingOnes(t *testing.T) {
	f, tr, r, svc, a, b := fullSet(t)
	lister := stalledLister{f, make(chan struct{}, 8), make(chan struct{})}
	r.Lister = lister
	check, res := r.BeginCheck([]firewall.SetDef{defIPPort, defVIPs6}, tr)
	checkRes(t, res, 0)                     // the headers are listed in the background
	checkRes(t, headersJudged(t, check), 1) // KIPVS-VIPS-6 created, empty
	<-lister.listed
	add, _ := tr.UpdateMembers(map[model.ServiceName][]firewall.Member{svc: members(defIPPort.Name, a, defIPPort.Name, b)}, true)
	if res := r.Apply(add); res.Writes < 3 { // twin created, filled, swapped
		t.Fatalf("growing past maxelem wrote %d times", res.Writes)
	}
	f.TakeOps()
	close(lister.release)
	if res := check.Wait(); res.Writes != 0 {
		t.Errorf("the check of a rebuilt set wrote %d times", res.Writes)
	}
	checkOps(t, f)
	checkSet(t, f, defIPPort.Name, "10.0.0.1,tcp:80", "10.0.0.2,tcp:80")

	r.Lister = nil
	f.Put(Spec{Name: defIPPort.Name, Type: firewall.HashIPPort, Family: firewall.IPv4, HashSize: 1024, MaxElem: 65536}, a)
	check, res = r.BeginCheck([]firewall.SetDef{defIPPort, defVIPs6}, tr)
	checkRes(t, res, 0)
	res, done, finished := check.StepNow()
	if !done || res.Writes != 1 || finished != 2 {
		t.Errorf("inline check: done %v after one step, %d sets finished (want 2), %d writes (want b added)", done, finished, res.Writes)
	}
	checkSet(t, f, defIPPort.Name, "10.0.0.1,tcp:80", "10.0.0.2,tcp:80")
}

// headerStalledLister holds its header listing until released.
type headerStalledLister struct {
	*FakeKernel
	listed, release chan struct{}
}

func (s headerStalledLister) ListHeaders() ([]Header, error) {
	return stall[[]Header](s.listed, s.release)(s.FakeKernel.ListHeaders())
}

// A background listing of the headers that a header write overtook (a change rebuilt the
// set at a larger maximum meanwhile) is not believed: the headers are listed again, and
// the stale header's maximum rebuilds nothing.
func TestCheckRelistsHeadersARebuildOvertook(t *testing.T) {
	f, tr, r, svc, a, b := fullSet(t)
	lister := headerStalledLister{f, make(chan struct{}, 8), make(chan struct{}, 8)}
	r.Lister = lister
	check, _ := r.BeginCheck([]firewall.SetDef{defIPPort}, tr)
	<-lister.listed // the kernel answered maxelem 1
	add, _ := tr.UpdateMembers(map[model.ServiceName][]firewall.Member{svc: members(defIPPort.Name, a, defIPPort.Name, b)}, true)
	if res := r.Apply(add); res.Writes < 3 { // twin created, filled, swapped
		t.Fatalf("growing past maxelem wrote %d times", res.Writes)
	}
	f.TakeOps()
	lister.release <- struct{}{} // the stale listing
	lister.release <- struct{}{} // the one taken again
	res := headersJudged(t, check)
	if res.Writes != 0 {
		t.Errorf("judging the headers wrote %d times (a stale header believed?)", res.Writes)
	}
	if n := len(lister.listed); n != 1 {
		t.Errorf("the headers were listed again %d times, want once", n)
	}
}

// Entries desired for a set that is not defined are reported by the repair, also through the
// desired state the dataplane passes (the Services' entries joined with the Service CIDRs'),
// and the defined sets are still made right.
func TestRepairReportsEntriesForAnUndefinedSet(t *testing.T) {
	f := NewFakeKernel()
	r := New(f)
	undefined := firewall.SetName("KIPVS-NOT-DEFINED")
	services := firewall.EntryMap{undefined: {ip("10.0.0.1"): true}, defIPPort.Name: {ipp("10.0.0.2", 80): true}}
	res := r.ResyncSets([]firewall.SetDef{defIPPort}, firewall.WithServiceCIDRs(services, firewall.EntryMap{}))
	if err := res.Errors[undefined]; err == nil || !strings.Contains(err.Error(), "not defined") {
		t.Errorf("errors %v, want one for %s", res.Errors, undefined)
	}
	if got, err := ListEntries(f, defIPPort.Name); err != nil || len(got) != 1 {
		t.Errorf("the defined set holds %v (%v), want its one entry", got, err)
	}
}

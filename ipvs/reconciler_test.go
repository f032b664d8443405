package ipvs

import (
	"errors"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/kube-ipvs/kube-ipvs/model"
)

func key(s string, proto model.Protocol) model.VSKey {
	ap := netip.MustParseAddrPort(s)
	return model.VSKey{Addr: ap.Addr(), Proto: proto, Port: ap.Port()}
}

func rs(s string) model.RSKey {
	ap := netip.MustParseAddrPort(s)
	return model.RSKey{Addr: ap.Addr(), Port: ap.Port()}
}

// vs builds a virtual server; reals alternate "addr:port", weight.
func vs(k model.VSKey, sched string, reals ...any) *model.VirtualServer {
	v := &model.VirtualServer{Key: k, Spec: model.VSSpec{Scheduler: sched}, Reals: map[model.RSKey]uint32{}}
	for i := 0; i < len(reals); i += 2 {
		v.Reals[rs(reals[i].(string))] = uint32(reals[i+1].(int))
	}
	return v
}

func withSpec(v *model.VirtualServer, spec model.VSSpec) *model.VirtualServer {
	c := clone(v)
	c.Spec = spec
	return c
}

func changes(vses ...*model.VirtualServer) map[model.VSKey]*model.VirtualServer {
	m := map[model.VSKey]*model.VirtualServer{}
	for _, v := range vses {
		m[v.Key] = v
	}
	return m
}

var (
	kA = key("10.96.0.1:80", model.TCP)
	kB = key("10.96.0.2:53", model.UDP)
	kC = key("10.96.0.3:443", model.TCP)
	kD = key("10.96.0.4:80", model.TCP)
	k6 = key("[fd00:96::1]:80", model.TCP)
)

func expectOps(t *testing.T, f *FakeKernel, want ...string) {
	t.Helper()
	got := f.TakeOps()
	if len(got) == 0 && len(want) == 0 {
		return
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("kernel calls:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

// readAllOps is what a whole read of a table holding keys logs: the listing, each one's real
// servers in order, and the listing again (read.go).
func readAllOps(keys ...model.VSKey) []string {
	slices.SortFunc(keys, func(a, b model.VSKey) int {
		if model.VSKeyLess(a, b) {
			return -1
		}
		return 1
	})
	ops := []string{"list-services"}
	for _, k := range keys {
		ops = append(ops, "get-reals "+k.String())
	}
	return append(ops, "list-services")
}

// readOps is what reading one virtual server by key logs.
func readOps(k model.VSKey) []string {
	return []string{"get-spec " + k.String(), "get-reals " + k.String()}
}

func expectClean(t *testing.T, res Result, writes int) {
	t.Helper()
	if res.Err != nil || len(res.Errors) != 0 {
		t.Errorf("unexpected errors: %v %v", res.Err, res.Errors)
	}
	if res.Writes != writes {
		t.Errorf("result counts %d writes, want %d", res.Writes, writes)
	}
}

func expectDump(t *testing.T, f *FakeKernel, vses ...*model.VirtualServer) {
	t.Helper()
	want := NewFakeKernel()
	for _, v := range vses {
		want.Put(v)
	}
	if got, w := f.Dump(), want.Dump(); got != w {
		t.Errorf("kernel table:\n%s\nwant:\n%s", got, w)
	}
}

func TestApplyCreatesThenSecondApplyCallsNothing(t *testing.T) {
	f := NewFakeKernel()
	r := NewReconciler(f)
	a := vs(kA, "rr", "10.244.0.2:8080", 1, "10.244.0.1:8080", 2)
	a6 := vs(k6, "wrr", "[fd00:244::1]:8080", 1)

	expectClean(t, r.Apply(changes(a, a6)), 5)
	expectOps(t, f,
		"new-service TCP 10.96.0.1:80 rr flags=0x0 timeout=0",
		"new-dest TCP 10.96.0.1:80 10.244.0.1:8080 weight=2",
		"new-dest TCP 10.96.0.1:80 10.244.0.2:8080 weight=1",
		"new-service TCP [fd00:96::1]:80 wrr flags=0x0 timeout=0",
		"new-dest TCP [fd00:96::1]:80 [fd00:244::1]:8080 weight=1",
	)
	expectDump(t, f, a, a6)
	if got, ok := r.Applied(kA); !ok || !got.Equal(a) {
		t.Errorf("Applied(%s) = %v, %v; want %v", kA, got, ok, a)
	}
	if r.Writes() != 5 {
		t.Errorf("Writes() = %d, want 5", r.Writes())
	}

	expectClean(t, r.Apply(changes(a, a6)), 0)
	expectOps(t, f)
	if r.Writes() != 5 {
		t.Errorf("Writes() = %d after a no-op Apply, want 5", r.Writes())
	}
}

func TestApplyCopiesItsInput(t *testing.T) {
	f := NewFakeKernel()
	r := NewReconciler(f)
	a := vs(kA, "rr", "10.244.0.1:8080", 1)
	r.Apply(changes(a))
	f.TakeOps()
	a.Reals[rs("10.244.0.9:8080")] = 1 // the caller reuses its map
	if got, _ := r.Applied(kA); len(got.Reals) != 1 {
		t.Fatalf("the cache shares the caller's map: %v", got)
	}
	got, _ := r.Applied(kA)
	got.Reals[rs("10.244.0.8:8080")] = 1
	if again, _ := r.Applied(kA); len(again.Reals) != 1 {
		t.Fatalf("Applied returns the cache itself: %v", again)
	}
}

func TestOneRealServerChangeIsOneCall(t *testing.T) {
	f := NewFakeKernel()
	r := NewReconciler(f)
	r.Apply(changes(vs(kA, "rr", "10.244.0.1:8080", 1)))
	f.TakeOps()

	expectClean(t, r.Apply(changes(vs(kA, "rr", "10.244.0.1:8080", 1, "10.244.0.2:8080", 1))), 1)
	expectOps(t, f, "new-dest TCP 10.96.0.1:80 10.244.0.2:8080 weight=1")

	expectClean(t, r.Apply(changes(vs(kA, "rr", "10.244.0.2:8080", 1))), 1)
	expectOps(t, f, "del-dest TCP 10.96.0.1:80 10.244.0.1:8080")

	expectClean(t, r.Apply(changes(vs(kA, "rr", "10.244.0.2:8080", 0))), 1)
	expectOps(t, f, "update-dest TCP 10.96.0.1:80 10.244.0.2:8080 weight=0")
	expectDump(t, f, vs(kA, "rr", "10.244.0.2:8080", 0))
}

func TestSpecChangeIsOneUpdateInPlace(t *testing.T) {
	f := NewFakeKernel()
	r := NewReconciler(f)
	base := vs(kA, "rr", "10.244.0.1:8080", 1, "10.244.0.2:8080", 1)
	r.Apply(changes(base))
	f.TakeOps()

	steps := []struct {
		spec model.VSSpec
		op   string
	}{
		{model.VSSpec{Scheduler: "sh"}, "update-service TCP 10.96.0.1:80 sh flags=0x0 timeout=0"},
		{model.VSSpec{Scheduler: "sh", Flags: model.FlagSchedFallbk | model.FlagSchedPort},
			"update-service TCP 10.96.0.1:80 sh flags=0x18 timeout=0"},
		{model.VSSpec{Scheduler: "sh", Flags: model.FlagSchedFallbk | model.FlagSchedPort | model.FlagPersistent, Timeout: 300},
			"update-service TCP 10.96.0.1:80 sh flags=0x19 timeout=300"},
		{model.VSSpec{Scheduler: "sh", Flags: model.FlagPersistent, Timeout: 60},
			"update-service TCP 10.96.0.1:80 sh flags=0x1 timeout=60"},
		{model.VSSpec{Scheduler: "rr"}, "update-service TCP 10.96.0.1:80 rr flags=0x0 timeout=0"},
	}
	for _, s := range steps {
		want := withSpec(base, s.spec)
		expectClean(t, r.Apply(changes(want)), 1)
		expectOps(t, f, s.op)
		expectDump(t, f, want)
	}
}

func TestKernelFlagsWeDoNotManageAreIgnored(t *testing.T) {
	f := NewFakeKernel() // the fake, like the kernel, adds HASHED to every service
	r := NewReconciler(f)
	a := withSpec(vs(kA, "sh", "10.244.0.1:8080", 1), model.VSSpec{Scheduler: "sh", Flags: model.FlagHashed | model.FlagSchedPort})
	expectClean(t, r.Apply(changes(a)), 2)
	expectOps(t, f,
		"new-service TCP 10.96.0.1:80 sh flags=0x10 timeout=0",
		"new-dest TCP 10.96.0.1:80 10.244.0.1:8080 weight=1")
	expectClean(t, r.Apply(changes(a)), 0)
	expectOps(t, f)
	r2 := NewReconciler(f)
	expectClean(t, resync(r2, changes(a), func(model.VSKey) bool { return true }), 0)
	expectOps(t, f, readAllOps(kA)...)
}

func TestApplyNilDeletes(t *testing.T) {
	f := NewFakeKernel()
	r := NewReconciler(f)
	r.Apply(changes(vs(kA, "rr", "10.244.0.1:8080", 1), vs(kB, "rr")))
	f.TakeOps()

	expectClean(t, r.Apply(map[model.VSKey]*model.VirtualServer{kA: nil}), 1)
	expectOps(t, f, "del-service TCP 10.96.0.1:80")
	if _, ok := r.Applied(kA); ok {
		t.Error("deleted virtual server still cached")
	}
	// Deleting what is not there costs nothing.
	expectClean(t, r.Apply(map[model.VSKey]*model.VirtualServer{kA: nil, kC: nil}), 0)
	expectOps(t, f)
	expectDump(t, f, vs(kB, "rr"))
}

func TestApplyCreatesAndUpdatesBeforeDeletes(t *testing.T) {
	f := NewFakeKernel()
	r := NewReconciler(f)
	r.Apply(changes(vs(kA, "rr"), vs(kC, "rr", "10.244.0.1:8080", 1)))
	f.TakeOps()

	// kA (sorted first) goes, kB comes, kC swaps its real server and changes scheduler.
	res := r.Apply(map[model.VSKey]*model.VirtualServer{
		kA: nil,
		kB: vs(kB, "rr", "10.244.0.5:53", 1),
		kC: vs(kC, "lc", "10.244.0.2:8080", 1),
	})
	expectClean(t, res, 6)
	expectOps(t, f,
		"new-service UDP 10.96.0.2:53 rr flags=0x0 timeout=0",
		"new-dest UDP 10.96.0.2:53 10.244.0.5:53 weight=1",
		"update-service TCP 10.96.0.3:443 lc flags=0x0 timeout=0",
		"new-dest TCP 10.96.0.3:443 10.244.0.2:8080 weight=1",
		"del-dest TCP 10.96.0.3:443 10.244.0.1:8080",
		"del-service TCP 10.96.0.1:80",
	)
}

func TestApplyRejectsInvalidInputWithoutCalls(t *testing.T) {
	f := NewFakeKernel()
	r := NewReconciler(f)
	mixed := vs(kA, "rr", "[fd00::1]:80", 1)
	res := r.Apply(map[model.VSKey]*model.VirtualServer{
		kA: mixed,
		kB: vs(kC, "rr"), // filed under the wrong key
		kD: vs(kD, "rr", "10.244.0.1:80", 1),
	})
	if res.Errors[kA] == nil || res.Errors[kB] == nil || len(res.Errors) != 2 {
		t.Errorf("errors %v, want one for %s and %s", res.Errors, kA, kB)
	}
	expectOps(t, f,
		"new-service TCP 10.96.0.4:80 rr flags=0x0 timeout=0",
		"new-dest TCP 10.96.0.4:80 10.244.0.1:80 weight=1")
}

func owned(prefix string) func(model.VSKey) bool {
	p := netip.MustParsePrefix(prefix)
	return func(k model.VSKey) bool { return p.Contains(k.Addr) }
}

func TestResyncAdoptsAMatchingKernelWithoutWrites(t *testing.T) {
	f := NewFakeKernel()
	a := withSpec(vs(kA, "sh", "10.244.0.1:8080", 1, "10.244.0.2:8080", 3),
		model.VSSpec{Scheduler: "sh", Flags: model.FlagSchedFallbk | model.FlagPersistent, Timeout: 120})
	b := vs(kB, "rr", "10.244.0.5:53", 1)
	f.Put(a)
	f.Put(b)

	r := NewReconciler(f) // a restarted proxy
	expectClean(t, resync(r, changes(a, b), owned("10.96.0.0/16")), 0)
	expectOps(t, f, readAllOps(kA, kB)...)
	if r.Writes() != 0 {
		t.Errorf("Writes() = %d", r.Writes())
	}
	expectClean(t, r.Apply(changes(a, b)), 0)
	expectOps(t, f)
}

func TestResyncRepairsDrift(t *testing.T) {
	f := NewFakeKernel()
	r := NewReconciler(f)
	a := vs(kA, "rr", "10.244.0.1:8080", 1)
	b := vs(kB, "rr", "10.244.0.5:53", 1, "10.244.0.6:53", 2)
	c := vs(kC, "rr", "10.244.0.7:443", 1)
	r.Apply(changes(a, b, c))
	f.TakeOps()

	// Someone else meddles: kA deleted, kB loses a real server and has a wrong weight,
	// kC is no longer desired, kD is an owned leftover, and 192.0.2.1 is not ours.
	f.Drop(kA)
	f.Put(vs(kB, "rr", "10.244.0.5:53", 7))
	f.Put(vs(kD, "rr", "10.244.9.9:80", 1))
	foreign := vs(key("192.0.2.1:80", model.TCP), "wlc", "192.0.2.10:80", 1)
	f.Put(foreign)

	res := resync(r, changes(a, b), owned("10.96.0.0/16"))
	expectClean(t, res, 6)
	expectOps(t, f, append(readAllOps(kB, kC, kD, foreign.Key),
		"new-service TCP 10.96.0.1:80 rr flags=0x0 timeout=0",
		"new-dest TCP 10.96.0.1:80 10.244.0.1:8080 weight=1",
		"update-dest UDP 10.96.0.2:53 10.244.0.5:53 weight=1",
		"new-dest UDP 10.96.0.2:53 10.244.0.6:53 weight=2",
		"del-service TCP 10.96.0.3:443",
		"del-service TCP 10.96.0.4:80",
	)...)
	expectDump(t, f, a, b, foreign)

	expectClean(t, resync(r, changes(a, b), owned("10.96.0.0/16")), 0)
	expectOps(t, f, readAllOps(kA, kB, foreign.Key)...)
	// Nothing owned: nothing deleted, but desired still made right.
	f.Put(vs(kD, "rr"))
	f.Drop(kA)
	expectClean(t, resync(r, changes(a, b), nil), 2)
	expectOps(t, f, append(readAllOps(kB, kD, foreign.Key),
		"new-service TCP 10.96.0.1:80 rr flags=0x0 timeout=0",
		"new-dest TCP 10.96.0.1:80 10.244.0.1:8080 weight=1")...)
	expectDump(t, f, a, b, vs(kD, "rr"), foreign)
}

func TestResyncDoesNotTrustAFailedDump(t *testing.T) {
	f := NewFakeKernel()
	r := NewReconciler(f)
	a := vs(kA, "rr", "10.244.0.1:8080", 1)
	r.Apply(changes(a))
	f.TakeOps()
	f.Fail = func(op string, _ model.VSKey) error {
		if op == "list-services" {
			return ErrDumpInterrupted
		}
		return nil
	}
	res := resync(r, nil, owned("10.96.0.0/16"))
	if !errors.Is(res.Err, ErrDumpInterrupted) || res.Writes != 0 {
		t.Errorf("Resync with an interrupted dump: %+v", res)
	}
	expectOps(t, f, "list-services", "list-services", "list-services") // dumpAttempts
	if _, ok := r.Applied(kA); !ok {
		t.Error("a failed dump replaced the cache")
	}
	expectDump(t, f, a)
}

// failOnce makes one op on one key fail once.
func failOnce(op string, k model.VSKey, err error) func(string, model.VSKey) error {
	done := false
	return func(o string, key model.VSKey) error {
		if !done && o == op && key == k {
			done = true
			return err
		}
		return nil
	}
}

func TestFailureIsReportedPerKeyAndRetried(t *testing.T) {
	boom := errors.New("injected failure")
	a := vs(kA, "rr", "10.244.0.1:8080", 1)
	b := vs(kB, "rr", "10.244.0.5:53", 1, "10.244.0.6:53", 1)
	c := vs(kC, "rr", "10.244.0.7:443", 1)

	t.Run("new-dest", func(t *testing.T) {
		f := NewFakeKernel()
		r := NewReconciler(f)
		f.Fail = failOnce("new-dest", kB, boom)
		res := r.Apply(changes(a, b, c))
		if len(res.Errors) != 1 || !errors.Is(res.Errors[kB], boom) {
			t.Fatalf("errors %v, want only %s: %v", res.Errors, kB, boom)
		}
		if res.Writes != 7 {
			t.Errorf("writes %d, want 7 (failed one included)", res.Writes)
		}
		ops := f.TakeOps()
		if !slices.Equal(ops[len(ops)-2:], readOps(kB)) {
			t.Errorf("the failed virtual server was not re-read: %v", ops)
		}
		expectDump(t, f, a, vs(kB, "rr", "10.244.0.6:53", 1), c)

		expectClean(t, r.Apply(changes(a, b, c)), 1)
		expectOps(t, f, "new-dest UDP 10.96.0.2:53 10.244.0.5:53 weight=1")
		expectDump(t, f, a, b, c)
	})

	t.Run("new-service", func(t *testing.T) {
		f := NewFakeKernel()
		r := NewReconciler(f)
		f.Fail = failOnce("new-service", kB, boom)
		res := r.Apply(changes(a, b, c))
		if len(res.Errors) != 1 || !errors.Is(res.Errors[kB], boom) {
			t.Fatalf("errors %v", res.Errors)
		}
		if _, ok := r.Applied(kB); ok {
			t.Error("a virtual server that failed to be created is cached")
		}
		f.TakeOps()
		expectClean(t, r.Apply(changes(a, b, c)), 3)
		expectOps(t, f,
			"new-service UDP 10.96.0.2:53 rr flags=0x0 timeout=0",
			"new-dest UDP 10.96.0.2:53 10.244.0.5:53 weight=1",
			"new-dest UDP 10.96.0.2:53 10.244.0.6:53 weight=1")
	})

	t.Run("create meets an existing one", func(t *testing.T) {
		f := NewFakeKernel()
		f.Put(vs(kB, "lc", "10.244.0.5:53", 1)) // created behind our back, cache does not know
		r := NewReconciler(f)
		res := r.Apply(changes(b))
		if res.Errors[kB] == nil {
			t.Fatal("creating over an existing virtual server did not fail")
		}
		// The real servers queued behind the failed create reached the existing virtual
		// server (10.244.0.6 was added, 10.244.0.5 was there): the re-read after the
		// failure shows that, so the retry only fixes the scheduler.
		f.TakeOps()
		expectClean(t, r.Apply(changes(b)), 1)
		expectOps(t, f, "update-service UDP 10.96.0.2:53 rr flags=0x0 timeout=0")
		expectDump(t, f, b)
	})

	t.Run("del-service", func(t *testing.T) {
		f := NewFakeKernel()
		r := NewReconciler(f)
		r.Apply(changes(a, b))
		f.Fail = failOnce("del-service", kA, boom)
		res := r.Apply(map[model.VSKey]*model.VirtualServer{kA: nil, kB: nil})
		if len(res.Errors) != 1 || !errors.Is(res.Errors[kA], boom) {
			t.Fatalf("errors %v", res.Errors)
		}
		f.TakeOps()
		expectClean(t, r.Apply(map[model.VSKey]*model.VirtualServer{kA: nil, kB: nil}), 1)
		expectOps(t, f, "del-service TCP 10.96.0.1:80")
		expectDump(t, f)
	})

	t.Run("refresh fails too", func(t *testing.T) {
		f := NewFakeKernel()
		r := NewReconciler(f)
		r.Apply(changes(a))
		f.Fail = func(op string, k model.VSKey) error {
			if k == kA && (op == "update-service" || op == "get-spec") {
				return boom
			}
			return nil
		}
		res := r.Apply(changes(withSpec(a, model.VSSpec{Scheduler: "lc"})))
		if !errors.Is(res.Errors[kA], boom) {
			t.Fatalf("errors %v", res.Errors)
		}
		if _, ok := r.Applied(kA); ok {
			t.Error("an unreadable virtual server stays cached")
		}
	})

	t.Run("already gone counts as deleted", func(t *testing.T) {
		f := NewFakeKernel()
		r := NewReconciler(f)
		r.Apply(changes(vs(kA, "rr", "10.244.0.1:8080", 1, "10.244.0.2:8080", 1), b))
		f.Drop(kB)
		f.Put(vs(kA, "rr", "10.244.0.1:8080", 1))
		f.TakeOps()
		expectClean(t, r.Apply(map[model.VSKey]*model.VirtualServer{kA: a, kB: nil}), 2)
		expectOps(t, f, "del-dest TCP 10.96.0.1:80 10.244.0.2:8080", "del-service UDP 10.96.0.2:53")
	})
}

func TestSchedulerUnavailable(t *testing.T) {
	f := NewFakeKernel()
	f.MissingSchedulers = map[string]bool{"nosuch": true}
	r := NewReconciler(f)
	a := vs(kA, "rr", "10.244.0.1:8080", 1)
	r.Apply(changes(a))
	f.TakeOps()

	// The spec cannot change, but the real servers still follow.
	want := withSpec(vs(kA, "rr", "10.244.0.2:8080", 1), model.VSSpec{Scheduler: "nosuch"})
	res := r.Apply(changes(want))
	var se *SchedulerUnavailableError
	if !errors.As(res.Errors[kA], &se) || se.Scheduler != "nosuch" {
		t.Fatalf("error %v, want a SchedulerUnavailableError for nosuch", res.Errors[kA])
	}
	expectDump(t, f, vs(kA, "rr", "10.244.0.2:8080", 1))
	if got, _ := r.Applied(kA); got.Spec.Scheduler != "rr" {
		t.Errorf("cache says %q after the failed update", got.Spec.Scheduler)
	}

	res = r.Apply(changes(vs(kB, "nosuch", "10.244.0.5:53", 1)))
	if !errors.As(res.Errors[kB], &se) {
		t.Fatalf("create with a missing scheduler: %v", res.Errors)
	}
	if _, ok := r.Applied(kB); ok {
		t.Error("a virtual server that could not be created is cached")
	}
}

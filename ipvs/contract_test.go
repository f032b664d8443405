package ipvs

import (
	"errors"
	"maps"
	"testing"

	"github.com/kube-ipvs/kube-ipvs/model"
)

// missingScheduler is a scheduler no kernel has: the fake of the contract is told so.
const missingScheduler = "kipvs-none"

// kernelContract runs every Kernel method and checks what it answers. The fake on the host
// (TestFakeKernelContract) and the kernel in the guest (TestGuestKernelContract) pass the
// same checks, so the fake that the reconciler's unit tests run on answers as the kernel
// does. open returns an empty table of its own for each case.
func kernelContract(t *testing.T, open func(t *testing.T) Kernel) {
	a := key("10.98.0.1:80", model.TCP)
	u := key("10.98.0.1:53", model.UDP)
	v6 := key("[fd00:98::1]:443", model.TCP)
	fwm := model.FWMarkKey(0x4000, false)
	r1, r2 := rsKey("10.244.98.1:8080"), rsKey("10.244.98.2:8080")
	r6 := rsKey("[fd00:244:98::1]:8443")
	rr := model.VSSpec{Scheduler: "rr"}
	sh := model.VSSpec{Scheduler: "sh", Flags: model.FlagSchedFallbk | model.FlagPersistent, Timeout: 600}

	mustNil := func(t *testing.T, what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	spec := func(t *testing.T, k Kernel, key model.VSKey) (model.VSSpec, bool) {
		t.Helper()
		s, ok, err := k.ServiceSpec(key)
		mustNil(t, "ServiceSpec", err)
		if s.Flags&^model.FlagsWeManage != 0 {
			t.Errorf("ServiceSpec(%s) reports flags %#x beyond FlagsWeManage", key, s.Flags)
		}
		return s, ok
	}
	reals := func(t *testing.T, k Kernel, key model.VSKey) map[model.RSKey]uint32 {
		t.Helper()
		got, err := k.RealServers(key, nil)
		mustNil(t, "RealServers", err)
		return got
	}

	t.Run("an empty table reads as empty", func(t *testing.T) {
		k := open(t)
		listed, err := k.ListServices()
		mustNil(t, "ListServices", err)
		if len(listed) != 0 {
			t.Errorf("listed %v", listed)
		}
		if _, ok := spec(t, k, a); ok {
			t.Error("ServiceSpec found a virtual server in an empty table")
		}
		if got := reals(t, k, a); len(got) != 0 {
			t.Errorf("RealServers of a missing virtual server: %v", got)
		}
		if _, err := ReadVirtualServer(k, a); !errors.Is(err, ErrNotFound) {
			t.Errorf("ReadVirtualServer of a missing one: %v, want ErrNotFound", err)
		}
	})

	t.Run("services are created, read, listed, updated in place and deleted", func(t *testing.T) {
		k := open(t)
		mustNil(t, "NewService", k.NewService(a, rr))
		mustNil(t, "NewService", k.NewService(u, rr))
		mustNil(t, "NewService", k.NewService(v6, sh))
		mustNil(t, "NewService", k.NewService(fwm, rr))
		listed, err := k.ListServices()
		mustNil(t, "ListServices", err)
		for key, want := range map[model.VSKey]model.VSSpec{a: rr, u: rr, v6: sh, fwm: rr} {
			got, ok := listed[key]
			if !ok || got != want {
				t.Errorf("%s listed as %+v (%v), want %+v", key, got, ok, want)
			}
			if got, ok := spec(t, k, key); !ok || got != want {
				t.Errorf("ServiceSpec(%s) = %+v (%v), want %+v", key, got, ok, want)
			}
		}
		if len(listed) != 4 {
			t.Errorf("listed %d virtual servers, want 4: %v", len(listed), listed)
		}
		mustNil(t, "NewDestination", k.NewDestination(a, r1, 1))
		mustNil(t, "UpdateService", k.UpdateService(a, sh))
		if got, _ := spec(t, k, a); got != sh {
			t.Errorf("after UpdateService: %+v, want %+v", got, sh)
		}
		if got := reals(t, k, a); len(got) != 1 || got[r1] != 1 {
			t.Errorf("UpdateService lost the real servers: %v", got)
		}
		mustNil(t, "UpdateService", k.UpdateService(a, rr)) // flags cleared again
		if got, _ := spec(t, k, a); got != rr {
			t.Errorf("after UpdateService back: %+v, want %+v", got, rr)
		}
		for _, key := range []model.VSKey{a, u, v6, fwm} {
			mustNil(t, "DelService", k.DelService(key))
		}
		if listed, err := k.ListServices(); err != nil || len(listed) != 0 {
			t.Errorf("after deleting all: %v %v", listed, err)
		}
	})

	t.Run("real servers are added, weighted and removed", func(t *testing.T) {
		k := open(t)
		mustNil(t, "NewService", k.NewService(a, rr))
		mustNil(t, "NewService", k.NewService(v6, rr))
		mustNil(t, "NewDestination", k.NewDestination(a, r1, 1))
		mustNil(t, "NewDestination", k.NewDestination(a, r2, 0))
		mustNil(t, "NewDestination", k.NewDestination(v6, r6, 3))
		if got := reals(t, k, a); !maps.Equal(got, map[model.RSKey]uint32{r1: 1, r2: 0}) {
			t.Errorf("real servers of %s: %v", a, got)
		}
		mustNil(t, "UpdateDestination", k.UpdateDestination(a, r2, 5))
		into := map[model.RSKey]uint32{r6: 9} // cleared by the read
		got, err := k.RealServers(a, into)
		mustNil(t, "RealServers", err)
		if !maps.Equal(got, map[model.RSKey]uint32{r1: 1, r2: 5}) {
			t.Errorf("real servers of %s after a weight change, read into a used map: %v", a, got)
		}
		mustNil(t, "DelDestination", k.DelDestination(a, r1))
		if got := reals(t, k, a); !maps.Equal(got, map[model.RSKey]uint32{r2: 5}) {
			t.Errorf("after DelDestination: %v", got)
		}
		vs, err := ReadVirtualServer(k, v6)
		mustNil(t, "ReadVirtualServer", err)
		if vs.Key != v6 || vs.Spec.Scheduler != "rr" || !maps.Equal(vs.Reals, map[model.RSKey]uint32{r6: 3}) {
			t.Errorf("ReadVirtualServer(%s) = %v", v6, vs)
		}
		all, err := ReadAll(k)
		mustNil(t, "ReadAll", err)
		if len(all) != 2 {
			t.Errorf("ReadAll: %v", all)
		}
		conns, err := k.Connections(a)
		mustNil(t, "Connections", err)
		if !maps.Equal(conns, map[model.RSKey]uint32{r2: 0}) {
			t.Errorf("Connections(%s) = %v, want r2 with none", a, conns)
		}
	})

	t.Run("what is missing is ErrNotFound, what exists is refused", func(t *testing.T) {
		k := open(t)
		notFound := func(what string, err error) {
			t.Helper()
			if !errors.Is(err, ErrNotFound) {
				t.Errorf("%s: %v, want ErrNotFound", what, err)
			}
		}
		notFound("UpdateService of a missing one", k.UpdateService(a, rr))
		notFound("DelService of a missing one", k.DelService(a))
		notFound("NewDestination to a missing one", k.NewDestination(a, r1, 1))
		notFound("UpdateDestination of a missing one", k.UpdateDestination(a, r1, 1))
		notFound("DelDestination of a missing one", k.DelDestination(a, r1))
		if conns, err := k.Connections(a); err != nil || len(conns) != 0 {
			t.Errorf("Connections of a missing one: %v, %v; want none", conns, err)
		}
		mustNil(t, "NewService", k.NewService(a, rr))
		notFound("UpdateDestination of a missing real server", k.UpdateDestination(a, r1, 1))
		notFound("DelDestination of a missing real server", k.DelDestination(a, r1))
		if err := k.NewService(a, rr); err == nil || errors.Is(err, ErrNotFound) {
			t.Errorf("NewService of an existing one: %v, want a refusal", err)
		}
		mustNil(t, "NewDestination", k.NewDestination(a, r1, 1))
		if err := k.NewDestination(a, r1, 1); err == nil || errors.Is(err, ErrNotFound) {
			t.Errorf("NewDestination of an existing one: %v, want a refusal", err)
		}
	})

	t.Run("a missing scheduler is SchedulerUnavailableError", func(t *testing.T) {
		k := open(t)
		var su *SchedulerUnavailableError
		if err := k.NewService(a, model.VSSpec{Scheduler: missingScheduler}); !errors.As(err, &su) || su.Scheduler != missingScheduler {
			t.Errorf("NewService: %v", err)
		}
		if _, ok := spec(t, k, a); ok {
			t.Error("a virtual server with a missing scheduler was created")
		}
		mustNil(t, "NewService", k.NewService(a, rr))
		if err := k.UpdateService(a, model.VSSpec{Scheduler: missingScheduler}); !errors.As(err, &su) {
			t.Errorf("UpdateService: %v", err)
		}
		if got, _ := spec(t, k, a); got != rr {
			t.Errorf("a failed update changed the spec: %+v", got)
		}
		// An existing virtual server is refused as existing, whatever the scheduler.
		if err := k.NewService(a, model.VSSpec{Scheduler: missingScheduler}); err == nil || errors.As(err, &su) {
			t.Errorf("NewService of an existing one with a missing scheduler: %v, want it refused as existing", err)
		}
	})

	t.Run("a batch is done at its flush, in order, with its failures by index", func(t *testing.T) {
		k := open(t)
		k.StartBatch()
		for _, err := range []error{
			k.NewService(a, rr),                                        // 0
			k.NewDestination(a, r1, 1),                                 // 1: its service comes first in the batch
			k.NewDestination(u, r1, 1),                                 // 2: no such service
			k.NewService(a, rr),                                        // 3: exists by now
			k.UpdateDestination(a, r1, 4),                              // 4
			k.NewService(u, model.VSSpec{Scheduler: missingScheduler}), // 5
		} {
			mustNil(t, "a queued write", err)
		}
		failed := map[int]error{}
		n := k.FlushBatch(func(i int, err error) { failed[i] = err })
		if n != 6 {
			t.Errorf("FlushBatch accounted for %d writes, want 6", n)
		}
		var su *SchedulerUnavailableError
		if len(failed) != 3 || !errors.Is(failed[2], ErrNotFound) || failed[3] == nil || !errors.As(failed[5], &su) {
			t.Errorf("failures %v, want 2 (ErrNotFound), 3 (exists) and 5 (scheduler)", failed)
		}
		if got := reals(t, k, a); !maps.Equal(got, map[model.RSKey]uint32{r1: 4}) {
			t.Errorf("after the batch: %v", got)
		}
		// Outside a batch a write is done at once.
		mustNil(t, "DelService", k.DelService(a))
		if _, ok := spec(t, k, a); ok {
			t.Error("a write after the flush was not done at once")
		}
	})
}

func rsKey(s string) model.RSKey {
	k := key(s, model.TCP)
	return model.RSKey{Addr: k.Addr, Port: k.Port}
}

func TestFakeKernelContract(t *testing.T) {
	kernelContract(t, func(*testing.T) Kernel {
		f := NewFakeKernel()
		f.MissingSchedulers = map[string]bool{missingScheduler: true}
		return f
	})
}

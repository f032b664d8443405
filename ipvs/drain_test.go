package ipvs

import (
	"testing"
	"time"

	"github.com/kube-ipvs/kube-ipvs/model"
)

// clock is a settable time source.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func drainingReconciler(f *FakeKernel, c *clock) *Reconciler {
	r := NewReconciler(f)
	r.SetGracefulTermination(30*time.Second, c.now)
	return r
}

func TestRemovedTCPRealServerDrainsUntilItsConnectionsEnd(t *testing.T) {
	f, c := NewFakeKernel(), &clock{t: time.Unix(1000, 0)}
	r := drainingReconciler(f, c)
	r.Apply(changes(vs(kA, "rr", "10.244.0.1:8080", 1, "10.244.0.2:8080", 1)))
	f.TakeOps()

	expectClean(t, r.Apply(changes(vs(kA, "rr", "10.244.0.1:8080", 1))), 1)
	expectOps(t, f, "update-dest TCP 10.96.0.1:80 10.244.0.2:8080 weight=0")
	if r.Draining() != 1 {
		t.Fatalf("draining %d, want 1", r.Draining())
	}
	// A no-op apply while draining writes nothing and keeps the drain.
	expectClean(t, r.Apply(changes(vs(kA, "rr", "10.244.0.1:8080", 1))), 0)
	expectOps(t, f)

	f.SetConnections(kA, rs("10.244.0.2:8080"), 2)
	expectClean(t, r.Drain(), 0)
	expectOps(t, f, "conns TCP 10.96.0.1:80")
	f.SetConnections(kA, rs("10.244.0.2:8080"), 0)
	expectClean(t, r.Drain(), 1)
	expectOps(t, f, "conns TCP 10.96.0.1:80", "del-dest TCP 10.96.0.1:80 10.244.0.2:8080")
	if r.Draining() != 0 {
		t.Fatalf("still draining %d", r.Draining())
	}
	expectDump(t, f, vs(kA, "rr", "10.244.0.1:8080", 1))
}

func TestDrainIsBoundedByTheTimeout(t *testing.T) {
	f, c := NewFakeKernel(), &clock{t: time.Unix(1000, 0)}
	r := drainingReconciler(f, c)
	r.Apply(changes(vs(kA, "rr", "10.244.0.1:8080", 1, "10.244.0.2:8080", 1)))
	r.Apply(changes(vs(kA, "rr", "10.244.0.1:8080", 1)))
	f.SetConnections(kA, rs("10.244.0.2:8080"), 5)
	f.TakeOps()
	c.t = c.t.Add(29 * time.Second)
	expectClean(t, r.Drain(), 0)
	c.t = c.t.Add(time.Second)
	expectClean(t, r.Drain(), 1)
	expectOps(t, f, "conns TCP 10.96.0.1:80", "conns TCP 10.96.0.1:80", "del-dest TCP 10.96.0.1:80 10.244.0.2:8080")
}

func TestUDPRealServerIsDeletedAtOnceAndReportedForConntrack(t *testing.T) {
	f, c := NewFakeKernel(), &clock{t: time.Unix(1000, 0)}
	r := drainingReconciler(f, c)
	res := r.Apply(changes(vs(kB, "rr", "10.244.0.1:53", 1, "10.244.0.2:53", 1)))
	if len(res.FirstUDPReals) != 1 || res.FirstUDPReals[0] != kB {
		t.Errorf("first UDP reals: %v", res.FirstUDPReals)
	}
	f.TakeOps()
	res = r.Apply(changes(vs(kB, "rr", "10.244.0.1:53", 1)))
	expectOps(t, f, "del-dest UDP 10.96.0.2:53 10.244.0.2:53")
	if len(res.RemovedUDP) != 1 || res.RemovedUDP[0].RS != rs("10.244.0.2:53") || res.FirstUDPReals != nil {
		t.Errorf("removed UDP %v, first %v", res.RemovedUDP, res.FirstUDPReals)
	}
	if r.Draining() != 0 {
		t.Error("a UDP real server must not drain")
	}
}

func TestShDrainSetsFallbackFirstAndRestoresFlagsAfter(t *testing.T) {
	f, c := NewFakeKernel(), &clock{t: time.Unix(1000, 0)}
	r := drainingReconciler(f, c)
	sh := model.VSSpec{Scheduler: "sh", Flags: model.FlagSchedPort}
	r.Apply(changes(withSpec(vs(kA, "", "10.244.0.1:8080", 1, "10.244.0.2:8080", 1), sh)))
	f.TakeOps()
	r.Apply(changes(withSpec(vs(kA, "", "10.244.0.1:8080", 1), sh)))
	expectOps(t, f,
		"update-service TCP 10.96.0.1:80 sh flags=0x18 timeout=0",
		"update-dest TCP 10.96.0.1:80 10.244.0.2:8080 weight=0")
	r.Drain()
	expectOps(t, f, "conns TCP 10.96.0.1:80",
		"del-dest TCP 10.96.0.1:80 10.244.0.2:8080",
		"update-service TCP 10.96.0.1:80 sh flags=0x10 timeout=0")
}

func TestEndpointBackWhileDrainingGetsItsWeightBack(t *testing.T) {
	f, c := NewFakeKernel(), &clock{t: time.Unix(1000, 0)}
	r := drainingReconciler(f, c)
	both := vs(kA, "rr", "10.244.0.1:8080", 1, "10.244.0.2:8080", 1)
	r.Apply(changes(both))
	r.Apply(changes(vs(kA, "rr", "10.244.0.1:8080", 1)))
	f.TakeOps()
	expectClean(t, r.Apply(changes(both)), 1)
	expectOps(t, f, "update-dest TCP 10.96.0.1:80 10.244.0.2:8080 weight=1")
	if r.Draining() != 0 {
		t.Error("a real server that is wanted again must stop draining")
	}
}

// After a restart the drain state comes back from the kernel (kubernetes #92019): a weight-0
// real server that is not wanted keeps draining, with no write; one that is wanted again gets
// its weight back.
func TestResyncAfterRestartRebuildsDrains(t *testing.T) {
	f, c := NewFakeKernel(), &clock{t: time.Unix(1000, 0)}
	f.Put(vs(kA, "rr", "10.244.0.1:8080", 1, "10.244.0.2:8080", 0))
	f.Put(vs(kC, "rr", "10.244.0.1:8080", 1, "10.244.0.3:8080", 0))
	r := drainingReconciler(f, c)
	res := resync(r, changes(
		vs(kA, "rr", "10.244.0.1:8080", 1),
		vs(kC, "rr", "10.244.0.1:8080", 1, "10.244.0.3:8080", 1)), nil)
	expectClean(t, res, 1)
	expectOps(t, f, append(readAllOps(kA, kC), "update-dest TCP 10.96.0.3:443 10.244.0.3:8080 weight=1")...)
	if r.Draining() != 1 {
		t.Fatalf("draining %d after resync, want 1", r.Draining())
	}
	f.SetConnections(kA, rs("10.244.0.2:8080"), 0)
	r.Drain()
	expectDump(t, f, vs(kA, "rr", "10.244.0.1:8080", 1), vs(kC, "rr", "10.244.0.1:8080", 1, "10.244.0.3:8080", 1))
}

package ipvs

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/kube-ipvs/kube-ipvs/model"
)

// randomVS builds a fresh virtual server for key with some of 6 real servers and an
// occasional scheduler change.
func randomVS(rng *rand.Rand, key model.VSKey) *model.VirtualServer {
	sched := []string{"rr", "sh", "mh", "wrr"}[rng.IntN(4)]
	v := &model.VirtualServer{Key: key, Spec: model.VSSpec{Scheduler: sched}, Reals: map[model.RSKey]uint32{}}
	for j := range 6 {
		if rng.IntN(2) == 0 {
			v.Reals[model.RSKey{Addr: netip.AddrFrom4([4]byte{10, 244, 0, byte(j + 1)}), Port: 8080}] = uint32(1 + rng.IntN(2))
		}
	}
	return v
}

// With ShareDesired the reconciler makes exactly the same kernel calls and reports the same
// cache as without, across creates, changes, drains, deletes, resyncs and refused writes;
// and it never changes an object it was given, nor a real-server map two given objects share.
func TestSharingMatchesCopying(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	c := &clock{t: time.Unix(1000, 0)}
	fc, fs := NewFakeKernel(), NewFakeKernel()
	copying, sharing := drainingReconciler(fc, c), drainingReconciler(fs, c)
	sharing.ShareDesired()
	// Both kernels refuse every fifth real-server add: the calls are the same on both, so
	// they refuse the same ones, and the caches must still agree.
	for _, f := range []*FakeKernel{fc, fs} {
		n := 0
		f.Fail = func(op string, _ model.VSKey) error {
			if op == "new-dest" {
				if n++; n%5 == 0 {
					return fmt.Errorf("refused")
				}
			}
			return nil
		}
	}
	keys := []model.VSKey{kA, kB, kC, kD, k6}
	var given []*model.VirtualServer
	var snapshots []string
	for step := range 300 {
		ch := map[model.VSKey]*model.VirtualServer{}
		for _, k := range keys {
			switch rng.IntN(4) {
			case 0:
				ch[k] = nil
			case 1, 2:
				v := randomVS(rng, k)
				if k == k6 {
					v.Reals = map[model.RSKey]uint32{{Addr: netip.MustParseAddr("fd00::1"), Port: 80}: 1}
				}
				ch[k] = v
			}
		}
		// The virtual servers of one Service port share one real-server map (package
		// proxy does that): editing the cache of one must not edit the other.
		if a, b := ch[kA], ch[kB]; a != nil && b != nil && rng.IntN(2) == 0 {
			b.Reals = a.Reals
		}
		for _, k := range keys {
			if v := ch[k]; v != nil {
				given = append(given, v)
				snapshots = append(snapshots, v.String())
			}
		}
		var rc, rs Result
		if step%50 == 49 {
			desired := map[model.VSKey]*model.VirtualServer{}
			for k, v := range ch {
				if v != nil {
					desired[k] = v
				}
			}
			owned := func(model.VSKey) bool { return true }
			rc, rs = resync(copying, desired, owned), resync(sharing, desired, owned)
		} else {
			rc, rs = copying.Apply(ch), sharing.Apply(ch)
		}
		if rng.IntN(3) == 0 {
			c.t = c.t.Add(time.Duration(rng.IntN(40)) * time.Second)
			rc.Writes += copying.Drain().Writes
			rs.Writes += sharing.Drain().Writes
		}
		if rc.Writes != rs.Writes || len(rc.Errors) != len(rs.Errors) || fmt.Sprint(fc.TakeOps()) != fmt.Sprint(fs.TakeOps()) {
			t.Fatalf("step %d: sharing made other calls than copying", step)
		}
		for _, k := range keys {
			a, okA := copying.Applied(k)
			b, okB := sharing.Applied(k)
			if okA != okB || (okA && a.String() != b.String()) {
				t.Fatalf("step %d: %v cached as %v with copies, %v with sharing", step, k, a, b)
			}
		}
	}
	for i, v := range given {
		if v.String() != snapshots[i] {
			t.Fatalf("a given virtual server was changed:\n%s\nwas\n%s", v, snapshots[i])
		}
	}
	if len(sharing.shared) == 0 {
		t.Error("nothing was shared")
	}
}

// A Resync repairs a table and then shares the desired objects; a second one of the healthy
// table reads it whole and writes nothing.
func TestResyncSharesAHealthyTable(t *testing.T) {
	desired := changes(vs(kA, "rr", "10.244.0.1:8080", 1), vs(kB, "rr", "10.244.0.1:53", 1), vs(kC, "sh", "10.244.0.3:443", 2))
	f := NewFakeKernel()
	r := NewReconciler(f)
	r.ShareDesired()
	f.Put(vs(kA, "rr", "10.244.0.1:8080", 1))       // right
	f.Put(vs(kB, "rr", "10.244.0.9:53", 1))         // wrong real server
	f.Put(vs(key("10.96.9.9:80", model.TCP), "rr")) // not wanted
	res := resync(r, desired, func(model.VSKey) bool { return true })
	expectClean(t, res, 1+2+1+1) // kB: add and delete; kC: service and real server; the extra: delete
	expectDump(t, f, desired[kA], desired[kB], desired[kC])
	if len(r.shared) != 3 {
		t.Errorf("%d of 3 virtual servers shared after the resync", len(r.shared))
	}
	f.TakeOps()
	expectClean(t, resync(r, desired, func(model.VSKey) bool { return true }), 0)
	expectOps(t, f, readAllOps(kA, kB, kC)...)
}

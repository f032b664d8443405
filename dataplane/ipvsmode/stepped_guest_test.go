//go:build guest

package ipvsmode

import (
	"errors"
	"net/netip"
	"os/exec"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/kube-ipvs/kube-ipvs/dataplane"
	"github.com/kube-ipvs/kube-ipvs/firewall"
	"github.com/kube-ipvs/kube-ipvs/ipvs"
	"github.com/kube-ipvs/kube-ipvs/model"
	"github.com/kube-ipvs/kube-ipvs/test/guestutil"
)

// A change made while the repair of 2,000 Services x 10 endpoints is under way, on the real
// kernel: it is written at once (between two steps) rather than after the repair, the
// repair's later steps leave it as it is, and a repair of a matching kernel writes nothing.
// The figures (the whole repair a change used to wait for, the longest step, the change's
// own time) are logged.
func TestGuestChangeDuringASteppedRepair(t *testing.T) {
	// A namespace of its own: the dataplane installs its ipsets and iptables rules as well,
	// which, left in the guest's root namespace, broke the traffic of the packages tested
	// after this one (the ipvs package's connections through virtual servers timed out).
	guestutil.EnterNode(t)
	const n, budget, link = 2000, 50, "kt-steps"
	dp, err := New(Config{Firewall: firewall.Config{ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}},
		NodePortMin: 30000, NodePortMax: 32767}, link, 0, "", nil, discard)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = exec.Command("ipvsadm", "-C").Run()
		if l, err := netlink.LinkByName(link); err == nil {
			_ = netlink.LinkDel(l)
		}
	})
	s := dataplane.Snapshot{Services: map[model.ServiceName]*model.ServiceState{}, VSes: map[model.VSKey]*model.VirtualServer{}, Binds: map[netip.Addr]bool{}}
	var keys []model.VSKey
	for i := range n {
		k := model.VSKey{Addr: netip.AddrFrom4([4]byte{10, 120, byte(i >> 8), byte(i)}), Proto: model.TCP, Port: 80}
		vs := &model.VirtualServer{Key: k, Kind: model.KindClusterIP, Spec: model.VSSpec{Scheduler: "rr"}, Reals: map[model.RSKey]uint32{}}
		for j := range 10 {
			vs.Reals[model.RSKey{Addr: netip.AddrFrom4([4]byte{10, 244, byte(i >> 4), byte(16*(i&15) + j + 1)}), Port: 8080}] = 1
		}
		s.VSes[k], s.Binds[k.Addr] = vs, true
		keys = append(keys, k)
	}
	t0 := time.Now()
	if res := dp.repairWhole(s); res.Failed() != 0 {
		t.Fatalf("cold start: %+v", res.Err)
	}
	t.Logf("cold start of %d virtual servers x 10 real servers: %s", n, time.Since(t0).Round(time.Millisecond))
	t0 = time.Now()
	if res := dp.repairWhole(s); res.Failed() != 0 || res.Writes != (dataplane.Writes{}) {
		t.Fatalf("whole repair of a matching kernel: writes %+v, err %v", res.Writes, res.Err)
	}
	whole := time.Since(t0)

	live := liveOf(&s)
	t0 = time.Now()
	if res := dp.BeginRepair(live); res.Failed() != 0 {
		t.Fatalf("begin: %v", res.Err)
	}
	begin := time.Since(t0)
	// The change: the last virtual server the repair will check gets an eleventh endpoint.
	changed := keys[n-1]
	next := &model.VirtualServer{Key: changed, Kind: model.KindClusterIP, Spec: s.VSes[changed].Spec, Reals: map[model.RSKey]uint32{}}
	for rs, w := range s.VSes[changed].Reals {
		next.Reals[rs] = w
	}
	extra := model.RSKey{Addr: netip.MustParseAddr("10.244.250.1"), Port: 8080}
	next.Reals[extra] = 1

	// With it, while the background listing of the virtual servers runs: the first virtual
	// server deleted and a new one created, which shift the kernel's count through its
	// table (a listing then misses or repeats one).
	gone := keys[0]
	added := &model.VirtualServer{Key: model.VSKey{Addr: netip.MustParseAddr("10.121.0.1"), Proto: model.TCP, Port: 80},
		Kind: model.KindClusterIP, Spec: model.VSSpec{Scheduler: "rr"}, Reals: map[model.RSKey]uint32{extra: 1}}

	var longest, change time.Duration
	steps, waiting, repairWrites := 0, 0, 0
	for done := false; !done; {
		if steps == 0 {
			s.VSes[changed] = next
			delete(s.VSes, gone)
			s.VSes[added.Key] = added
			t1 := time.Now()
			ch := dataplane.Change{VSes: map[model.VSKey]*model.VirtualServer{changed: next, gone: nil, added.Key: added}}
			if res := dp.Apply(ch); res.Failed() != 0 || res.Writes.IPVS != 4 {
				t.Fatalf("the change: %+v", res)
			}
			change = time.Since(t1)
		}
		t1 := time.Now()
		var res dataplane.Result
		res, done = dp.RepairStep(live, budget)
		longest = max(longest, time.Since(t1))
		steps++
		if res.Waiting {
			waiting++
		}
		repairWrites += res.Writes.IPVS + res.Writes.Addresses + res.Writes.SetEntries + res.Writes.Restores
		if res.Failed() != 0 {
			t.Fatalf("step %d: %+v", steps, res)
		}
	}
	// At most budget a step, and fewer when a step's time is up (dataplane.StepTime).
	if steps < n/budget {
		t.Errorf("%d steps for %d virtual servers at %d a step", steps, n, budget)
	}
	if repairWrites != 0 {
		t.Errorf("the stepped repair of a matching kernel (and of the change) wrote %d times", repairWrites)
	}
	k, err := ipvs.NewKernel()
	if err != nil {
		t.Fatal(err)
	}
	got, err := ipvs.ReadVirtualServer(k, changed)
	if err != nil || got.Reals[extra] != 1 || len(got.Reals) != 11 {
		t.Fatalf("after the repair the changed virtual server is %v (%v); want the change's 11 real servers", got, err)
	}
	if _, err := ipvs.ReadVirtualServer(k, gone); !errors.Is(err, ipvs.ErrNotFound) {
		t.Errorf("after the repair the deleted virtual server %s: %v; want it gone", gone, err)
	}
	if got, err := ipvs.ReadVirtualServer(k, added.Key); err != nil || len(got.Reals) != 1 {
		t.Errorf("after the repair the created virtual server is %v (%v); want it with its real server", got, err)
	}
	if all, err := ipvs.ReadAll(k); err != nil || len(all) != n {
		t.Errorf("after the repair the kernel has %d virtual servers (%v), want %d", len(all), err, n)
	}
	if waiting == 0 {
		t.Error("no step waited for the background listing of the virtual servers: was it listed in BeginRepair?")
	}
	t.Logf("whole repair (what a change waited for): %s; stepped: begin %s, %d steps of %d (%d waiting for the listing), longest %s; the change itself %s",
		whole.Round(time.Millisecond), begin.Round(time.Millisecond), steps, budget, waiting, longest.Round(time.Microsecond), change.Round(time.Microsecond))
}

package ipvsmode

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kube-ipvs/kube-ipvs/dataplane"
	"github.com/kube-ipvs/kube-ipvs/dummyif"
	"github.com/kube-ipvs/kube-ipvs/ipset"
	"github.com/kube-ipvs/kube-ipvs/iptables"
	"github.com/kube-ipvs/kube-ipvs/ipvs"
	"github.com/kube-ipvs/kube-ipvs/model"
)

// A handover file written by one dataplane reaches the next one's IPVS reconciler once: it
// is removed as it is read, and one from another boot or namespace is refused (and removed
// too). No file is no error.
func TestHandoverFileIsTakenOnceAndOnlyOnTheSameBoot(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ipvs-handover")
	k := ipvs.NewFakeKernel()
	key := tcpKey("10.96.0.1", 80)
	vs := &model.VirtualServer{Key: key, Spec: model.VSSpec{Scheduler: "rr"},
		Reals: map[model.RSKey]uint32{{Addr: key.Addr.Next(), Port: 8080}: 1}}
	before := fakeDataplane(k, dummyif.NewFakeNetlink(), ipset.NewFakeKernel(), &iptables.FakeExec{})
	if res := before.p.IPVS.Apply(map[model.VSKey]*model.VirtualServer{key: vs}); res.Err != nil || len(res.Errors) > 0 {
		t.Fatalf("apply: %v %v", res.Err, res.Errors)
	}
	if n, err := before.SaveHandover(path); err != nil || n != 1 {
		t.Fatalf("SaveHandover: %d, %v", n, err)
	}
	if left, _ := filepath.Glob(path + ".*"); len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}

	after := fakeDataplane(k, dummyif.NewFakeNetlink(), ipset.NewFakeKernel(), iptables.NewFakeExec())
	if n, err := after.LoadHandover(path); err != nil || n != 1 {
		t.Fatalf("LoadHandover: %d, %v", n, err)
	}
	if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the handover is still there after it was read (%v)", err)
	}
	k.TakeOps()
	s := dataplane.Snapshot{VSes: map[model.VSKey]*model.VirtualServer{key: vs}}
	if res := after.repairWhole(s); res.Err != nil || res.Writes.IPVS != 0 {
		t.Fatalf("resync: %v, %d IPVS writes", res.Err, res.Writes.IPVS)
	}
	if ops := k.TakeOps(); len(ops) != 1 || ops[0] != "list-services" {
		t.Errorf("the resync after the handover called %q; want the service listing alone", ops)
	}
	if n, err := after.LoadHandover(path); n != 0 || err != nil {
		t.Errorf("a second LoadHandover: %d, %v; want none", n, err)
	}

	// Written on another boot: refused, and gone.
	if _, err := before.SaveHandover(path); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	id, _ := handoverIdentity()
	forged := strings.Replace(string(b), id, strings.Replace(id, "boot ", "boot 0", 1), 1)
	if err := os.WriteFile(path, []byte(forged), 0o600); err != nil {
		t.Fatal(err)
	}
	if n, err := after.LoadHandover(path); n != 0 || err == nil || !strings.Contains(err.Error(), "another boot") {
		t.Errorf("a handover from another boot: %d, %v; want it refused", n, err)
	}
	if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the refused handover is still there (%v)", err)
	}
}

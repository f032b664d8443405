package iptproxy

import (
	"context"
	"maps"
	"net/netip"
	"testing"

	"github.com/kube-ipvs/kube-ipvs/dataplane"
	"github.com/kube-ipvs/kube-ipvs/iptables"
	"github.com/kube-ipvs/kube-ipvs/model"
)

// The fallback's repair is one step: BeginRepair repairs everything, and
// the first RepairStep is done. It hears no drift and weighs no real servers.
func TestDataplaneRepairsInOneStep(t *testing.T) {
	fx := iptables.NewFakeExec()
	cfg := testCfg
	cfg.Tools.Backend = iptables.NFT
	d, err := NewDataplane(fx, cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	svc := makeService(svcOpts{name: "web", clusterIPs: []string{"10.96.0.10"}, port: 80})
	st := build(svc, testNodeIPs, makeSlice(svc, 80, ep{"10.244.2.1", false}))
	live := dataplane.Live{
		Services: map[model.ServiceName]*model.ServiceState{nameOf(svc): st},
		VS:       func(k model.VSKey) *model.VirtualServer { return st.VSes[k] },
		VSKeys:   maps.Keys(st.VSes),
		Binds:    func() map[netip.Addr]bool { return nil },
		NodeIPs:  testNodeIPs,
	}
	if res := d.BeginRepair(live); res.Err != nil || res.Writes.Restores == 0 {
		t.Fatalf("BeginRepair: %+v, want the rules written", res)
	}
	if res, done := d.RepairStep(live, 1); !done || res.Writes != (dataplane.Writes{}) {
		t.Errorf("RepairStep: %+v, done %v; want done with nothing written", res, done)
	}
	live.Whole = true
	if res := d.BeginRepair(live); res.Err != nil || res.Writes.Restores != 0 {
		t.Errorf("a whole repair after the first: %+v, want nothing written", res)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d.WatchDrift(ctx, func() { t.Error("drift heard") }) // returns at once
	if !d.Watching() {
		t.Error("Watching: false, want true (nothing to wait for)")
	}
	if res := d.RepairDrift(live); res.Writes != (dataplane.Writes{}) || res.Err != nil {
		t.Errorf("RepairDrift: %+v, want nothing", res)
	}
	if w, err := d.RealWeights([]model.VSKey{{}}); w != nil || err != nil {
		t.Errorf("RealWeights: %v, %v; want none", w, err)
	}
}

package ipvs

import (
	"net/netip"
	"testing"

	"github.com/kube-ipvs/kube-ipvs/model"
)

func TestKernelWeightsReadsOnlyTheKeysAndSkipsMissing(t *testing.T) {
	k := NewFakeKernel()
	have := model.VSKey{Addr: netip.MustParseAddr("10.96.0.9"), Proto: model.TCP, Port: 80}
	missing := model.VSKey{Addr: netip.MustParseAddr("10.96.0.10"), Proto: model.TCP, Port: 80}
	rs := model.RSKey{Addr: netip.MustParseAddr("10.244.0.2"), Port: 8080}
	k.Put(&model.VirtualServer{Key: have, Spec: model.VSSpec{Scheduler: "rr"}, Reals: map[model.RSKey]uint32{rs: 0}})
	r := NewReconciler(k)
	got, err := r.KernelWeights([]model.VSKey{have, missing})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[have] == nil || got[have][rs] != 0 || len(got[have]) != 1 {
		t.Fatalf("weights %v", got)
	}
	if _, ok := r.Applied(have); ok {
		t.Fatal("KernelWeights filled the cache")
	}
}

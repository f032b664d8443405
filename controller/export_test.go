package controller

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-ipvs/kube-ipvs/model"
	"github.com/kube-ipvs/kube-ipvs/proxy"
)

// TestDesiredServicesResolvesConflicts: the exported state is the resolved one: a virtual
// server two Services want is only in its owner's state, the loser's says why, and each
// endpoint's pod name survives the informer cache's trimming.
func TestDesiredServicesResolvesConflicts(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	for _, name := range []string{"a", "b"} {
		if _, err := h.client.CoreV1().Services("ns").Create(ctx, service(name, "10.96.0.7", nil), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	sl := slice("a", "a-1", "10.244.0.1")
	sl.Endpoints[0].TargetRef = &corev1.ObjectReference{Kind: "Pod", Namespace: "ns", Name: "a-pod", UID: "u1"}
	if _, err := h.client.DiscoveryV1().EndpointSlices("ns").Create(ctx, sl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.waitDirty("a")
	h.waitDirty("b")
	h.waitSlice("a-1")
	h.syncChanged()
	got := map[string]*model.ServiceState{}
	for _, st := range h.c.DesiredServices() {
		got[st.Name.Name] = st
	}
	a, b := got["a"], got["b"]
	if a == nil || b == nil {
		t.Fatalf("want both Services, got %v", got)
	}
	if len(a.VSes) != 1 || len(b.VSes) != 0 {
		t.Errorf("the contested virtual server: a has %d, b has %d; want 1 and 0", len(a.VSes), len(b.VSes))
	}
	if len(b.Reasons) != 1 || b.Reasons[0].Reason != proxy.ReasonVirtualServerConflict {
		t.Errorf("the loser's reasons: %v", b.Reasons)
	}
	if ch := a.EndpointChoices(); len(ch) != 1 || ch[0].Pod != "a-pod" || !ch[0].Chosen {
		t.Errorf("the owner's endpoint choices: %+v", ch)
	}
}

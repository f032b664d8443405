package controller

import (
	"context"
	"io"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kube-ipvs/kube-ipvs/healthcheck"
)

// FirstRepair is called exactly once: after the first full sync that did not fail as a
// whole, never after a failed one or a sync of changes only, and not again later. /healthz
// already reports that sync when it is called, so what it starts cannot delay readiness.
func TestFirstRepairIsCalledOnceAfterTheFirstWholeRepair(t *testing.T) {
	calls := 0
	ph := healthcheck.NewProxyHealth(time.Hour)
	healthyAtCall := false
	h := startHarness(t, fake.NewClientset(), Observers{ProxyHealth: ph, FirstRepair: func() { calls++; healthyAtCall = ph.Healthy() }})
	h.client.CoreV1().Services("ns").Create(context.Background(), service("a", "10.96.0.1", nil), metav1.CreateOptions{})
	h.waitDirty("a")
	if err := h.c.sync(false); err != nil || calls != 0 {
		t.Fatalf("a sync of changes: %v, FirstRepair called %d times; want 0", err, calls)
	}
	h.dp.repairErr = io.ErrUnexpectedEOF
	if err := h.c.sync(true); err == nil || calls != 0 {
		t.Fatalf("a full sync that failed as a whole: %v, FirstRepair called %d times; want 0", err, calls)
	}
	// A single virtual server failing does not fail the repair as a whole: the rules are in.
	h.dp.failNext[vsKey("10.96.0.1", 80)] = io.ErrUnexpectedEOF
	if err := h.c.sync(true); err == nil {
		t.Fatal("the failed virtual server did not fail the sync")
	}
	if calls != 1 {
		t.Fatalf("after the first whole repair FirstRepair was called %d times; want 1", calls)
	}
	if !healthyAtCall {
		t.Error("/healthz was not healthy yet when FirstRepair was called")
	}
	for range 2 {
		if err := h.c.sync(true); err != nil {
			t.Fatal(err)
		}
	}
	if calls != 1 {
		t.Errorf("after more repairs FirstRepair was called %d times; want 1", calls)
	}
}

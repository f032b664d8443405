package metrics

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestRepairCycleDone(t *testing.T) {
	m := newTestMetrics()
	m.RepairCycleDone(4*time.Second, time.Second, 30*time.Millisecond)
	if got := testutil.ToFloat64(m.repair.cycleCoreUse); got != 0.25 {
		t.Errorf("core share %v, want 0.25", got)
	}
	if got := testutil.ToFloat64(m.repair.stepMaxSecond); got != 0.03 {
		t.Errorf("longest step %v, want 0.03", got)
	}
	if n := testutil.CollectAndCount(m.repair.cycleSeconds); n != 1 {
		t.Errorf("%d cycle series, want 1", n)
	}
}

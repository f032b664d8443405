package metrics

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestRepairCycleDone(t *testing.T) {
	m := newTestMetrics()
	m.RepairCycleDone(4*time.Second, time.Second, 30*time.Millisecond, map[string]time.Duration{StepCheck: 30 * time.Millisecond, StepServices: 2 * time.Millisecond})
	if got := testutil.ToFloat64(m.repair.cycleCoreUse); got != 0.25 {
		t.Errorf("core share %v, want 0.25", got)
	}
	if got := testutil.ToFloat64(m.repair.stepMaxSecond); got != 0.03 {
		t.Errorf("longest step %v, want 0.03", got)
	}
	if n := testutil.CollectAndCount(m.repair.cycleSeconds); n != 1 {
		t.Errorf("%d cycle series, want 1", n)
	}
	for kind, want := range map[string]float64{StepCheck: 0.03, StepServices: 0.002, StepBegin: 0} {
		if got := testutil.ToFloat64(m.repair.kindMax.WithLabelValues(kind)); got != want {
			t.Errorf("longest %s step %v, want %v", kind, got, want)
		}
	}
	m.RepairCycleDone(2*time.Second, time.Second, 0, nil)
	if n, sum := m.RepairCycles(); n != 2 || sum != 6 {
		t.Errorf("RepairCycles: %d cycles, %v s in all; want 2, 6 s", n, sum)
	}
}

func TestRepairStepDoneByKind(t *testing.T) {
	m := newTestMetrics()
	m.RepairStepDone(StepBegin, 3*time.Millisecond)
	m.RepairStepDone(StepBegin, 5*time.Millisecond)
	m.RepairStepDone(StepCheck, time.Millisecond)
	if n := testutil.CollectAndCount(m.repair.stepSeconds); n != len(StepKinds) {
		t.Errorf("%d step series, want one per kind (%d)", n, len(StepKinds))
	}
	counts := map[string]uint64{}
	fams, _ := m.Registry().Gather()
	for _, f := range fams {
		if f.GetName() != Namespace+"_repair_step_duration_seconds" {
			continue
		}
		for _, s := range f.GetMetric() {
			counts[s.GetLabel()[0].GetValue()] = s.GetHistogram().GetSampleCount()
		}
	}
	if counts[StepBegin] != 2 || counts[StepCheck] != 1 || counts[StepServices] != 0 {
		t.Errorf("steps counted by kind %v, want begin 2, check 1, services 0", counts)
	}
}

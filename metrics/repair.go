package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// repairMetrics describe the periodic repair cycles, which run in bounded steps between
// changes (package controller).
type repairMetrics struct {
	cycleSeconds  prometheus.Histogram
	cycleCoreUse  prometheus.Gauge
	stepMaxSecond prometheus.Gauge
}

func newRepairMetrics(reg *prometheus.Registry) repairMetrics {
	r := repairMetrics{
		cycleSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "repair_cycle_duration_seconds",
			Help:    "Wall time of a periodic repair cycle, from its first step to its last (changes are applied between the steps).",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 17), // 10ms .. ~11min
		}),
		cycleCoreUse: newStateGauge("repair_cycle_core_share",
			"CPU time (user and system) the last repair cycle's steps used, divided by the cycle's wall time: the share of one core it took."),
		stepMaxSecond: newStateGauge("repair_step_max_duration_seconds",
			"The longest step of the last repair cycle: the most a change waited for the repair."),
	}
	reg.MustRegister(r.cycleSeconds, r.cycleCoreUse, r.stepMaxSecond)
	return r
}

// RepairCycleDone records a finished repair cycle: its wall time, the CPU time its steps
// used, and its longest step.
func (m *Metrics) RepairCycleDone(wall, cpu, longestStep time.Duration) {
	m.repair.cycleSeconds.Observe(wall.Seconds())
	if wall > 0 {
		m.repair.cycleCoreUse.Set(cpu.Seconds() / wall.Seconds())
	}
	m.repair.stepMaxSecond.Set(longestStep.Seconds())
}

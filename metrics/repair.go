package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Repair step kinds: label values of repair_step_duration_seconds.
const (
	StepServices = "services" // Services recomputed and their difference applied
	StepBegin    = "begin"    // the dataplane's repair begun: link, set headers, listings
	StepCheck    = "check"    // virtual servers, set listings or rules checked
)

// StepKinds are the repair step kinds, in the order a cycle runs them.
var StepKinds = []string{StepServices, StepBegin, StepCheck}

// repairMetrics describe the periodic repair cycles, which run in bounded steps between
// changes (package controller).
type repairMetrics struct {
	cycleSeconds  prometheus.Histogram
	cycleCoreUse  prometheus.Gauge
	stepMaxSecond prometheus.Gauge
	stepSeconds   *prometheus.HistogramVec
	kindMax       *prometheus.GaugeVec
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
		stepSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "repair_step_duration_seconds",
			Help:    "Wall time of one repair step, by kind: services (recomputed and applied), begin (the dataplane's repair begun), check (the kernel's state checked). A change arriving during a step waits for it.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16), // 0.5ms .. ~16s
		}, []string{"kind"}),
		kindMax: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "repair_step_kind_max_duration_seconds",
			Help: "The longest step of each kind in the last repair cycle (0: none of that kind ran).",
		}, []string{"kind"}),
	}
	for _, k := range StepKinds {
		r.stepSeconds.WithLabelValues(k)
		r.kindMax.WithLabelValues(k)
	}
	reg.MustRegister(r.cycleSeconds, r.cycleCoreUse, r.stepMaxSecond, r.stepSeconds, r.kindMax)
	return r
}

// RepairStepDone records one repair step of kind (one of StepKinds).
func (m *Metrics) RepairStepDone(kind string, took time.Duration) {
	m.repair.stepSeconds.WithLabelValues(kind).Observe(took.Seconds())
}

// RepairCycleDone records a finished repair cycle: its wall time, the CPU time its steps
// used, its longest step, and the longest step of each kind (a kind missing: none ran).
func (m *Metrics) RepairCycleDone(wall, cpu, longestStep time.Duration, longestOfKind map[string]time.Duration) {
	m.repair.cycleSeconds.Observe(wall.Seconds())
	if wall > 0 {
		m.repair.cycleCoreUse.Set(cpu.Seconds() / wall.Seconds())
	}
	m.repair.stepMaxSecond.Set(longestStep.Seconds())
	for _, k := range StepKinds {
		m.repair.kindMax.WithLabelValues(k).Set(longestOfKind[k].Seconds())
	}
}

// RepairCycles returns how many repair cycles ended and their summed wall time, read from
// repair_cycle_duration_seconds alone: the bench asks five times a second while it measures
// latency, and a Gather of the whole registry each time was garbage of its own (hundreds of
// MB over a churn at 50,000 Services) that the collector chased beside the proxy's.
func (m *Metrics) RepairCycles() (count uint64, seconds float64) {
	var out dto.Metric
	if m.repair.cycleSeconds.Write(&out) != nil {
		return 0, 0
	}
	return out.GetHistogram().GetSampleCount(), out.GetHistogram().GetSampleSum()
}

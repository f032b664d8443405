package bench

import (
	"bytes"
	"runtime/trace"
	"sync"
	"time"

	"github.com/kube-ipvs/kube-ipvs/metrics"
)

// SlowTrace asks for execution traces of the churn's slowest moments: the runtime's flight
// recorder keeps the last few seconds, and a change slower than Threshold, or a repair step
// longer than slowStepSeconds, has them written to Out (at most Max of them). The recorder
// costs CPU (a fifth of the guest's at 50,000 Services): a traced run's latencies are for
// diagnosis, not for the report. A trace shows what a change waited for (a repair step, a
// garbage collection, the scheduler), which percentiles cannot.
type SlowTrace struct {
	Threshold time.Duration
	Max       int
	Out       func(sentAt float64, took time.Duration, trace []byte)
}

// slowRecorder is the flight recorder of a churn with SlowTrace set.
type slowRecorder struct {
	o       SlowTrace
	fr      *trace.FlightRecorder
	mu      sync.Mutex
	written int
	// out writes the traces one at a time, away from the churn's watcher: a trace on the
	// guest's console takes seconds, which no change's latency must count.
	outMu sync.Mutex
	outs  sync.WaitGroup
}

// startSlowRecorder starts the flight recorder (nil when no trace is asked for, or when one
// cannot start: the churn goes on without).
func (r *runner) startSlowRecorder() *slowRecorder {
	o := r.o.SlowTrace
	if o.Threshold <= 0 || o.Out == nil {
		return nil
	}
	if o.Max <= 0 {
		o.Max = 2
	}
	// A change's wait plus a second before it; the guest's console carries the trace, so
	// its size is bounded.
	fr := trace.NewFlightRecorder(trace.FlightRecorderConfig{MinAge: o.Threshold + time.Second, MaxBytes: 24 << 20})
	if err := fr.Start(); err != nil {
		r.log("churn: no flight recorder: %v", err)
		return nil
	}
	r.log("churn: flight recorder on, traces of changes slower than %s", o.Threshold)
	return &slowRecorder{o: o, fr: fr}
}

// seen writes the recorder's window when a change took longer than the threshold.
func (s *slowRecorder) seen(sentAt float64, took time.Duration) {
	if s == nil || took < s.o.Threshold {
		return
	}
	s.write(sentAt, took)
}

// slowStep writes the recorder's window when a repair step longer than slowStepSeconds
// just ended (took 0 in the output): a long step holds every change that arrives during it.
func (s *slowRecorder) slowStep(at float64) {
	if s != nil {
		s.write(at, 0)
	}
}

func (s *slowRecorder) write(sentAt float64, took time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.written >= s.o.Max {
		return
	}
	var buf bytes.Buffer
	if _, err := s.fr.WriteTo(&buf); err != nil {
		return
	}
	s.written++
	s.outs.Go(func() {
		s.outMu.Lock()
		defer s.outMu.Unlock()
		s.o.Out(sentAt, took, buf.Bytes())
	})
}

// stop ends the recording once the traces asked for are written.
func (s *slowRecorder) stop() {
	if s != nil {
		s.fr.Stop()
		s.outs.Wait()
	}
}

// slowStepSeconds is a bucket bound of kube_ipvs_repair_step_duration_seconds: steps above it
// are traced.
const slowStepSeconds = 0.256

// slowSteps counts the repair steps longer than slowStepSeconds so far.
func (r *runner) slowSteps() uint64 {
	fams, err := r.metrics.Registry().Gather()
	if err != nil {
		return 0
	}
	for _, f := range fams {
		if f.GetName() != metrics.Namespace+"_repair_step_duration_seconds" {
			continue
		}
		var total, within uint64
		for _, m := range f.GetMetric() {
			h := m.GetHistogram()
			total += h.GetSampleCount()
			for _, b := range h.GetBucket() {
				if b.GetUpperBound() == slowStepSeconds {
					within += b.GetCumulativeCount()
				}
			}
		}
		return total - within
	}
	return 0
}

package bench

import (
	"bytes"
	"runtime/trace"
	"sync"
	"time"
)

// SlowTrace asks for execution traces of the churn's slowest moments: the runtime's flight
// recorder keeps the last few seconds, and a change slower than Threshold has them written
// to Out (at most Max of them). A trace shows what a change waited for (a repair step, a
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

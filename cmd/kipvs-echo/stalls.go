package main

import (
	"fmt"
	"sync"
	"time"
)

// stallWatch records when this process was not running: a goroutine sleeps in short ticks
// and notes every wake-up that came much later than asked. On an emulated node the whole
// guest, or a busy vCPU, can stop a process for seconds; a request's time limit then runs
// out while neither the client nor the kernel could handle a packet. A failure is reported
// with the stall that overlapped it, so that a proxy's fault and a stopped node can be told
// apart from the numbers.
type stallWatch struct {
	tick, least time.Duration // the sleep asked for, and the lateness worth recording

	mu    sync.Mutex
	gaps  []stall
	start time.Time
}

// stall is a time the process did not run: from until to.
type stall struct{ from, to time.Time }

func (s stall) length() time.Duration { return s.to.Sub(s.from) }

// watchStalls starts recording stalls longer than least until stop is closed.
func watchStalls(tick, least time.Duration, stop <-chan struct{}) *stallWatch {
	w := &stallWatch{tick: tick, least: least, start: time.Now()}
	go func() {
		for {
			before := time.Now()
			select {
			case <-stop:
				return
			case <-time.After(tick):
			}
			w.note(before, time.Now())
		}
	}()
	return w
}

// note records the sleep from before to after if it overran by w.least or more.
func (w *stallWatch) note(before, after time.Time) {
	if late := after.Sub(before) - w.tick; late >= w.least {
		w.mu.Lock()
		w.gaps = append(w.gaps, stall{from: before.Add(w.tick), to: after})
		w.mu.Unlock()
	}
}

// during is how long the process was stalled between from and to.
func (w *stallWatch) during(from, to time.Time) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	var d time.Duration
	for _, g := range w.gaps {
		a, b := g.from, g.to
		if from.After(a) {
			a = from
		}
		if to.Before(b) {
			b = to
		}
		if b.After(a) {
			d += b.Sub(a)
		}
	}
	return d
}

// report says how many stalls there were and the longest, with its clock time.
func (w *stallWatch) report() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var longest stall
	var total time.Duration
	for _, g := range w.gaps {
		total += g.length()
		if g.length() > longest.length() {
			longest = g
		}
	}
	if len(w.gaps) == 0 {
		return fmt.Sprintf("the client was never stalled %s or more in %s", w.least, time.Since(w.start).Round(time.Millisecond))
	}
	return fmt.Sprintf("the client was stalled %d times for %s or more, %s in all in %s; the longest %s at %s",
		len(w.gaps), w.least, total.Round(time.Millisecond), time.Since(w.start).Round(time.Millisecond),
		longest.length().Round(time.Millisecond), longest.from.UTC().Format("15:04:05.000"))
}

package main

import (
	"strings"
	"testing"
	"time"
)

// A late wake-up is a stall over the time it overran, and during counts only its overlap
// with the window asked about.
func TestStallWatchCountsOverlap(t *testing.T) {
	w := &stallWatch{tick: 10 * time.Millisecond, least: 100 * time.Millisecond, start: time.Now()}
	t0 := time.Date(2026, 12, 5, 21, 37, 26, 0, time.UTC)
	w.note(t0, t0.Add(50*time.Millisecond))                                            // 40 ms late: not a stall
	w.note(t0.Add(time.Second), t0.Add(time.Second+10*time.Millisecond+3*time.Second)) // 3 s
	if got := w.during(t0, t0.Add(10*time.Second)); got != 3*time.Second {
		t.Fatalf("during the whole window: %v, want 3s", got)
	}
	from := t0.Add(time.Second + 10*time.Millisecond)
	if got := w.during(from.Add(2*time.Second), from.Add(5*time.Second)); got != time.Second {
		t.Fatalf("during the stall's last second: %v, want 1s", got)
	}
	if got := w.during(t0, from); got != 0 {
		t.Fatalf("before the stall: %v, want 0", got)
	}
	if r := w.report(); !strings.Contains(r, "stalled 1 times") || !strings.Contains(r, "the longest 3s at 21:37:27.010") {
		t.Fatalf("report: %q", r)
	}
}

// A running watch sees a process that keeps running as never stalled.
func TestStallWatchQuietProcess(t *testing.T) {
	stop := make(chan struct{})
	w := watchStalls(5*time.Millisecond, time.Minute, stop)
	time.Sleep(50 * time.Millisecond)
	close(stop)
	if r := w.report(); !strings.Contains(r, "never stalled") {
		t.Fatalf("report: %q", r)
	}
}

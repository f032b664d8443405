package controller

import (
	"testing"
	"time"
)

func TestParseSchedstat(t *testing.T) {
	got, ok := parseSchedstat("7839091 4026588 3\n")
	if !ok || got != (threadTime{CPU: 7839091 * time.Nanosecond, RunQueue: 4026588 * time.Nanosecond}) {
		t.Errorf("parseSchedstat = %+v, %v", got, ok)
	}
	for _, bad := range []string{"", "12", "x 1 2"} {
		if _, ok := parseSchedstat(bad); ok {
			t.Errorf("parseSchedstat(%q) accepted", bad)
		}
	}
}

// A goroutine that spins is measured on the CPU; one that sleeps is not.
func TestThreadClockTellsSpinningFromSleeping(t *testing.T) {
	stop := startThreadClock().stop
	for end := time.Now().Add(50 * time.Millisecond); time.Now().Before(end); {
	}
	spun := stop()
	stop = startThreadClock().stop
	time.Sleep(50 * time.Millisecond)
	slept := stop()
	if spun.CPU < 10*time.Millisecond {
		t.Errorf("50 ms of spinning measured %v on a CPU", spun.CPU)
	}
	if slept.CPU > 10*time.Millisecond {
		t.Errorf("50 ms of sleep measured %v on a CPU", slept.CPU)
	}
}

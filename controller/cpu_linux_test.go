package controller

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"
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

// A goroutine that spins is measured on the CPU; one that sleeps is not. The spin lasts until
// the kernel's own per-thread CPU time (getrusage) has grown by 50 ms, not 50 ms of wall time:
// on a busy machine the thread may get a small part of its wall time on a CPU.
func TestThreadClockTellsSpinningFromSleeping(t *testing.T) {
	stop := startThreadClock().stop
	before := rusageThreadCPU(t)
	for deadline := time.Now().Add(30 * time.Second); rusageThreadCPU(t)-before < 50*time.Millisecond; {
		if time.Now().After(deadline) {
			stop()
			t.Fatal("30 s of spinning did not get 50 ms on a CPU")
		}
	}
	spun := stop()
	stop = startThreadClock().stop
	time.Sleep(50 * time.Millisecond)
	slept := stop()
	if spun.CPU < 25*time.Millisecond {
		t.Errorf("spinning for 50 ms of CPU time (getrusage) measured %v on a CPU", spun.CPU)
	}
	if slept.CPU > 10*time.Millisecond {
		t.Errorf("50 ms of sleep measured %v on a CPU", slept.CPU)
	}
}

// rusageThreadCPU is the calling thread's user and system time as getrusage reports it.
func rusageThreadCPU(t *testing.T) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_THREAD, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

package controller

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// threadTime is where a goroutine's wall time went while it was measured: on a CPU (user
// and system, the kernel's work for its netlink requests included), or runnable but
// waiting for one (the scheduler's run queue: a busy node, or a CPU limit). The rest of the
// wall time it was blocked: on a lock, the kernel, or I/O.
type threadTime struct {
	CPU, RunQueue time.Duration
}

// threadCPU starts measuring the calling goroutine until the returned function is called;
// the goroutine stays on its OS thread meanwhile, so that the thread's figures are its own.
func threadCPU() func() threadTime {
	runtime.LockOSThread()
	before, ok := threadUsage()
	return func() threadTime {
		defer runtime.UnlockOSThread()
		after, ok2 := threadUsage()
		if !ok || !ok2 {
			return threadTime{}
		}
		return threadTime{CPU: after.CPU - before.CPU, RunQueue: after.RunQueue - before.RunQueue}
	}
}

// threadUsage reads the calling thread's scheduler statistics (/proc/thread-self/schedstat:
// time on a CPU and time waiting on a run queue, in nanoseconds), or, where the kernel keeps
// none, its CPU time alone.
func threadUsage() (threadTime, bool) {
	if b, err := os.ReadFile("/proc/thread-self/schedstat"); err == nil {
		if t, ok := parseSchedstat(string(b)); ok {
			return t, true
		}
	}
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_THREAD, &ru); err != nil {
		return threadTime{}, false
	}
	return threadTime{CPU: time.Duration(ru.Utime.Nano() + ru.Stime.Nano())}, true
}

// parseSchedstat reads "oncpu_ns runqueue_ns timeslices".
func parseSchedstat(s string) (threadTime, bool) {
	f := strings.Fields(s)
	if len(f) < 2 {
		return threadTime{}, false
	}
	cpu, err1 := strconv.ParseInt(f[0], 10, 64)
	wait, err2 := strconv.ParseInt(f[1], 10, 64)
	if err1 != nil || err2 != nil {
		return threadTime{}, false
	}
	return threadTime{CPU: time.Duration(cpu), RunQueue: time.Duration(wait)}, true
}

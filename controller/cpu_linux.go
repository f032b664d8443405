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

// threadClock is a measurement of the calling goroutine under way (startThreadClock).
type threadClock struct {
	before threadTime
	ok     bool
}

// startThreadClock starts measuring the calling goroutine, which stays on its OS thread until
// stop or drop.
func startThreadClock() threadClock {
	runtime.LockOSThread()
	before, ok := threadUsage()
	return threadClock{before: before, ok: ok}
}

// stop ends the measurement and returns it.
func (c threadClock) stop() threadTime {
	defer runtime.UnlockOSThread()
	after, ok := threadUsage()
	if !c.ok || !ok {
		return threadTime{}
	}
	return threadTime{CPU: after.CPU - c.before.CPU, RunQueue: after.RunQueue - c.before.RunQueue}
}

// drop ends the measurement without reading it (a fast sync logs no figures).
func (c threadClock) drop() { runtime.UnlockOSThread() }

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

package controller

import (
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// threadCPU starts measuring the CPU time (user and system) the calling goroutine uses
// until the returned function is called; the goroutine stays on its OS thread meanwhile,
// so that the thread's usage is the step's (the kernel's work for its netlink requests
// included).
func threadCPU() func() time.Duration {
	runtime.LockOSThread()
	before, ok := threadUsage()
	return func() time.Duration {
		defer runtime.UnlockOSThread()
		after, ok2 := threadUsage()
		if !ok || !ok2 {
			return 0
		}
		return after - before
	}
}

func threadUsage() (time.Duration, bool) {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_THREAD, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}

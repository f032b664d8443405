package bench

import (
	"context"
	"fmt"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// sampleHeap records the peak heap in use until ctx ends: liveHeap, taken after a GC at
// chosen moments, would miss the peaks in between. It reads runtime/metrics, not
// runtime.ReadMemStats: that stops the world, 55 ms at a time at 50,000 Services under
// emulation (an execution trace), which the changes measured beside it waited for.
func (r *runner) sampleHeap(ctx context.Context) {
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	// In-use heap spans, as MemStats.HeapInuse: the objects and the free room in their spans.
	samples := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/memory/classes/heap/unused:bytes"}}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		metrics.Read(samples)
		inuse := samples[0].Value.Uint64() + samples[1].Value.Uint64()
		r.heapMu.Lock()
		r.heapPeak = max(r.heapPeak, inuse)
		r.heapMu.Unlock()
	}
}

func liveHeap() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// vmHWM is the process's peak resident set size.
func vmHWM() uint64 { return procStatusKB("/proc/self/status", "VmHWM:") * 1024 }

func memTotalMiB() int { return int(procStatusKB("/proc/meminfo", "MemTotal:") / 1024) }

// slabBytes is the kernel's slab memory (IPVS, addresses, routes and sets live there).
func slabBytes() uint64 { return procStatusKB("/proc/meminfo", "Slab:") * 1024 }

func procStatusKB(path, field string) uint64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				v, _ := strconv.ParseUint(f[0], 10, 64)
				return v
			}
		}
	}
	return 0
}

func kernelRelease() string {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return ""
	}
	return unix.ByteSliceToString(u.Release[:])
}

func mib(b uint64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }

// goMemLimit is the runtime's soft memory limit (GOMEMLIMIT), 0 if none is set.
func goMemLimit() int64 {
	if l := debug.SetMemoryLimit(-1); l != math.MaxInt64 {
		return l
	}
	return 0
}

// Package foreground lets the proxy's background work give way while a change is applied.
//
// A repair cycle lists the kernel's tables in the background (the IPVS table, a hairpin set
// of half a million entries), beside the sync loop. Yielding the P between datagrams was not
// enough at 50,000 Services under emulation: the listing's kernel work (each datagram of a
// netlink dump is filled when the reader asks for the next), its allocation (GC assists
// charged to the sync) and the kernel locks it takes (the IPVS mutex while a dump datagram
// is filled) still sat in a change's path, and the churn's p99 was four times its median.
//
// The sync loop raises the gate while a change is due or being applied and lowers it after;
// a background reader calls Yield between two pieces of work and parks while the gate is
// up. Parking between two receives also pauses the kernel's side of a dump. A raised gate
// holds the background for at most MaxHold from when it was raised, so that a loop that
// never goes idle (changes back to back) cannot starve a repair.
//
// The gate is one per process because what it shares out is the process's CPUs. Measured at
// 50,000 Services it changed little (churn p99 87 ms without, 81 ms with): most of the wait
// there comes before a change is marked, when the gate is not up yet (see BENCHMARKS.md).
package foreground

import (
	"runtime"
	"sync/atomic"
	"time"
)

// MaxHold bounds how long one raising of the gate parks the background: about ten of the
// longest incremental syncs at 50,000 Services under emulation.
const MaxHold = 100 * time.Millisecond

type raised struct {
	lowered chan struct{} // closed by Lower
	until   time.Time     // raised + MaxHold
}

var gate atomic.Pointer[raised]

// hold is MaxHold, but for tests.
var hold = MaxHold

// parks counts the Yields that parked (for tests).
var parks atomic.Int64

// Raise raises the gate, if it is not up already (an up gate keeps its first deadline).
func Raise() {
	if gate.Load() != nil {
		return
	}
	gate.CompareAndSwap(nil, &raised{lowered: make(chan struct{}), until: time.Now().Add(hold)})
}

// Lower lowers the gate and wakes whoever is parked at it.
func Lower() {
	if g := gate.Swap(nil); g != nil {
		close(g.lowered)
	}
}

// Up reports whether the gate is up.
func Up() bool { return gate.Load() != nil }

// Yield is a background reader's point of giving way: it parks while the gate is up (until
// it is lowered, or its MaxHold runs out), and otherwise gives the P to another goroutine.
func Yield() {
	g := gate.Load()
	if g == nil {
		runtime.Gosched()
		return
	}
	d := time.Until(g.until)
	if d <= 0 {
		runtime.Gosched()
		return
	}
	parks.Add(1)
	t := time.NewTimer(d)
	select {
	case <-g.lowered:
	case <-t.C:
	}
	t.Stop()
}

// YieldIf is where a reader that may run in the background gives way between two pieces of
// work: Yield for a background one, runtime.Gosched for one in the sync loop (which must
// never park at its own gate).
func YieldIf(background bool) {
	if background {
		Yield()
		return
	}
	runtime.Gosched()
}

// Parks returns how many Yields have parked since the process began.
func Parks() int64 { return parks.Load() }

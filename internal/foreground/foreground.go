// Package foreground lets the proxy's background work give way while a change is applied.
//
// A repair cycle lists the kernel's tables in the background (the IPVS table, a hairpin set
// of half a million entries), beside the sync loop. Yielding the P between datagrams alone
// leaves the listing's kernel work (each datagram of a netlink dump is filled when the
// reader asks for the next), its allocation (GC assists charged to the sync) and the kernel
// locks it takes (the IPVS mutex while a dump datagram is filled) in a change's path.
//
// The sync loop raises a Gate while a change is due or being applied and lowers it after;
// a background reader calls Yield between two pieces of work and parks while the gate is
// up. Parking between two receives also pauses the kernel's side of a dump. A raised gate
// holds the background for at most MaxHold from when it was raised, so that a loop that
// never goes idle (changes back to back) cannot starve a repair.
//
// One Gate serves a process, since what it shares out is the process's CPUs; it is made
// where the proxy is put together (cmd/kube-ipvs) and handed to the controller, which
// raises it, and to the background kernel handles, which park at it. make bench runs the
// churn with and without it in one boot (BENCHMARKS.md, The foreground gate): without it the
// churn's p99 was 1.3 to 1.4 times as long at 10,000 and 50,000 Services.
package foreground

import (
	"runtime"
	"sync/atomic"
	"time"
)

// MaxHold bounds how long one raising of the gate parks the background: about ten of the
// longest incremental syncs at 50,000 Services under emulation.
const MaxHold = 100 * time.Millisecond

// Gate is where background work parks while a change is applied. A nil *Gate is a gate
// that is never raised: Yield only gives the P away, and Raise and Lower do nothing (what
// a reader in the sync loop itself, or a test without a loop, wants).
type Gate struct {
	raised atomic.Pointer[raised]
	hold   time.Duration
	parks  atomic.Int64 // Yields that parked
}

type raised struct {
	lowered chan struct{} // closed by Lower
	until   time.Time     // raised + hold
}

// NewGate returns a lowered gate that holds the background for at most MaxHold.
func NewGate() *Gate { return NewGateHolding(MaxHold) }

// NewGateHolding returns a lowered gate that holds the background for at most hold from
// each raising (tests that must see a park whatever the machine's speed hold it longer).
func NewGateHolding(hold time.Duration) *Gate { return &Gate{hold: hold} }

// Raise raises the gate, if it is not up already (an up gate keeps its first deadline).
func (g *Gate) Raise() {
	if g == nil || g.raised.Load() != nil {
		return
	}
	g.raised.CompareAndSwap(nil, &raised{lowered: make(chan struct{}), until: time.Now().Add(g.hold)})
}

// Lower lowers the gate and wakes whoever is parked at it.
func (g *Gate) Lower() {
	if g == nil {
		return
	}
	if r := g.raised.Swap(nil); r != nil {
		close(r.lowered)
	}
}

// Up reports whether the gate is up.
func (g *Gate) Up() bool { return g != nil && g.raised.Load() != nil }

// Yield is a background reader's point of giving way: it parks while the gate is up (until
// it is lowered, or its hold runs out), and otherwise gives the P to another goroutine.
func (g *Gate) Yield() {
	var r *raised
	if g != nil {
		r = g.raised.Load()
	}
	if r == nil {
		runtime.Gosched()
		return
	}
	d := time.Until(r.until)
	if d <= 0 {
		runtime.Gosched()
		return
	}
	g.parks.Add(1)
	t := time.NewTimer(d)
	select {
	case <-r.lowered:
	case <-t.C:
	}
	t.Stop()
}

// Parks returns how many Yields have parked at g.
func (g *Gate) Parks() int64 {
	if g == nil {
		return 0
	}
	return g.parks.Load()
}

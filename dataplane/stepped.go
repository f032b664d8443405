package dataplane

import "context"

// SteppedRepairer is a Dataplane whose repair can be cut into bounded steps: the controller
// applies changes between them, so that no change waits for a whole repair. The steps of
// one repair are BeginRepair, then RepairStep until it says done; a change applied between
// two steps is never reverted by a later one.
type SteppedRepairer interface {
	// BeginRepair starts a repair: the work that is not cut into steps, and the listing the
	// steps work through.
	BeginRepair(Live) Result
	// RepairStep checks and repairs up to budget more virtual servers against live.
	RepairStep(live Live, budget int) (res Result, done bool)
}

// DriftWatcher is a Dataplane that hears of some of the kernel's drift as it happens
// (netlink notifications about kube-ipvs0, say), instead of finding it in the next repair.
type DriftWatcher interface {
	// WatchDrift runs until ctx ends, calling drifted (from its own goroutine) whenever
	// drift waits for RepairDrift.
	WatchDrift(ctx context.Context, drifted func())
	// RepairDrift repairs the drift heard so far, against live; the sync goroutine calls it.
	RepairDrift(Live) Result
	// Watching reports whether the notifications are live: a listing made while they are
	// is followed by them, and no repair cycle need list again.
	Watching() bool
}

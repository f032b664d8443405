package ipvsmode

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/kube-ipvs/kube-ipvs/dataplane"
	"github.com/kube-ipvs/kube-ipvs/dummyif"
)

// VIPWatcher hears of drift of the Service addresses' binding from the kernel's
// notifications (dummyif.Watcher for kube-ipvs0's addresses). It is all RepairDrift needs,
// so that another binding (local routes) can bring its own.
type VIPWatcher interface {
	// Run watches until ctx ends, calling drifted when drift waits for Take.
	Run(ctx context.Context, drifted func())
	// Take returns the drift heard since the last Take.
	Take() dummyif.Drift
	// Epoch is the live subscription's number, 0 when none is live.
	Epoch() uint64
}

// WatchDrift runs the VIP watcher until ctx ends (at once without one).
func (d *Dataplane) WatchDrift(ctx context.Context, drifted func()) {
	if d.p.Watcher != nil {
		d.p.Watcher.Run(ctx, drifted)
	}
}

// Watching reports whether the VIP watcher's subscription is live (true without a watcher:
// there is nothing to wait for).
func (d *Dataplane) Watching() bool { return d.p.Watcher == nil || d.p.Watcher.Epoch() != 0 }

// RepairDrift binds again the wanted addresses that were removed from kube-ipvs0, or, when
// the link was deleted or notifications were lost, re-creates the link and lists it again.
func (d *Dataplane) RepairDrift(l dataplane.Live) dataplane.Result {
	if d.p.Watcher == nil {
		return dataplane.Result{}
	}
	dr := d.p.Watcher.Take()
	if !d.addrListingTrusted() {
		return d.repairAddresses(wantOf(l), nil, nil)
	}
	return d.repairAddresses(wantOf(l), &dr, nil)
}

// repairAddresses is kube-ipvs0's repair (dummyif.Reconciler.Repair): from what the
// watcher heard (heard, trusted since the last listing), or from a listing of the link
// (heard nil or Lost), whose addresses found is told before anything is written.
func (d *Dataplane) repairAddresses(want dummyif.Want, heard *dummyif.Drift, found func(map[netip.Addr]bool)) dataplane.Result {
	if heard == nil || heard.Lost {
		d.noteAddrListing()
	}
	start := time.Now()
	res := addrResult(d.p.Addresses.Repair(want, heard, found))
	if res.Err != nil {
		res.Err = fmt.Errorf("repairing the dummy interface's addresses: %w", res.Err)
	}
	res.Phases.Addresses = time.Since(start)
	return res
}

// wantOf is the addresses live wants bound.
func wantOf(l dataplane.Live) dummyif.Want { return dummyif.Want{Bound: l.Bound, All: l.Binds} }

// noteAddrListing records that kube-ipvs0's addresses are listed now, under the watcher's
// live subscription (if any).
func (d *Dataplane) noteAddrListing() {
	if d.p.Watcher != nil {
		d.listedEpoch = d.p.Watcher.Epoch()
	}
}

// addrListingTrusted says whether the cache of kube-ipvs0's addresses follows the kernel:
// a subscription was live at the last listing and has been ever since.
func (d *Dataplane) addrListingTrusted() bool {
	if d.p.Watcher == nil {
		return false
	}
	e := d.p.Watcher.Epoch()
	return e != 0 && e == d.listedEpoch
}

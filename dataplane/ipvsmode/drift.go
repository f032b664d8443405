package ipvsmode

import (
	"context"
	"net/netip"

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
	if dr.Lost || !d.addrListingTrusted() {
		if res := d.ensureLink(); res.Err != nil {
			return res
		}
		res, _ := d.relistAddresses(l)
		return res
	}
	var again []netip.Addr
	for _, a := range dr.Removed {
		if l.Bound(a) {
			again = append(again, a)
		}
	}
	return addrResult(d.p.Addresses.Restore(again))
}

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

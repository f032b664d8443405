package ipvs

import "time"

// When a repair lists the whole IPVS table.
//
// A check reads every virtual server the proxy knows of (cached or desired) by its key at
// its step, the spec and the real servers, one short request each: the kernel finds the
// virtual server in its hash table. The one thing those reads cannot find is a stray: a
// virtual server on an address the proxy owns that it never made and does not want
// (another writer's, an operator's ipvsadm, a kube-proxy still running). Only a listing of
// the whole table shows those, and the kernel lists its table quadratically: every netlink
// round of the dump walks the table from its start to where the last round stopped, under
// the IPVS mutex that every write takes. At 50,000 Services (70,000 virtual servers) under
// emulation the rounds took 4-15 ms each and 12-16 s in all; a change's write waited for
// the round under way, and during the listing the median change took 30 ms instead of 7.
//
// So a check lists the table only when the last listing is at least listingSpacing times
// its own length ago (its wall time: a background listing's pauses for the sync loop make
// it longer, never shorter): the listings then hold the mutex for at most 1/listingSpacing
// of the time, and the changes they delay stay out of the 99th percentile. A small table lists
// in milliseconds and so in every repair cycle, as before; a large one less often (at
// 70,000 virtual servers under emulation, every 40 minutes or so). What the proxy made is
// still repaired within one cycle; a stray is found within max(one cycle, the spacing).
const listingSpacing = 200

// minRationedListing is the shortest listing that is spaced out: one shorter holds the
// mutex too briefly to delay a change noticeably, so a table that lists so fast is listed by
// every check.
const minRationedListing = 10 * time.Millisecond

// listingDue reports whether a check beginning at now lists the whole table (under mu).
func (r *Reconciler) listingDue(now time.Time) bool {
	return r.listingAt.IsZero() || r.listingTook < minRationedListing ||
		now.Sub(r.listingAt) >= listingSpacing*r.listingTook
}

// noteListing records a listing of the whole table (ListServices) that began and ended at
// those times (under mu).
func (r *Reconciler) noteListing(began, end time.Time) {
	r.listingAt, r.listingTook = end, end.Sub(began)
}

// NextListing returns when the next check lists the whole table (the zero time: the next
// one does) and how long the last listing took.
func (r *Reconciler) NextListing() (next time.Time, lastTook time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.listingAt.IsZero() {
		return time.Time{}, 0
	}
	return r.listingAt.Add(listingSpacing * r.listingTook), r.listingTook
}

package backendcheck

import (
	"container/heap"
	"time"
)

// jitterFraction spreads each endpoint's next check over interval ± 10%, so that
// endpoints that started together drift apart instead of being probed in bursts.
const jitterFraction = 0.1

// firstDue is when a newly known endpoint is first checked: anywhere in the first
// interval, so that a Service with many endpoints (or a restart with many Services) does
// not probe them all at once. r is uniform in [0, 1).
func firstDue(now time.Time, interval time.Duration, r float64) time.Time {
	return now.Add(time.Duration(r * float64(interval)))
}

// nextDue is when an endpoint checked at now is checked again: interval ± jitterFraction.
func nextDue(now time.Time, interval time.Duration, r float64) time.Time {
	f := 1 - jitterFraction + 2*jitterFraction*r
	return now.Add(time.Duration(f * float64(interval)))
}

// dueHeap orders the targets waiting for their next check by due time. A target being
// checked is not in it, so it is never probed twice at once.
type dueHeap []*target

func (h dueHeap) Len() int           { return len(h) }
func (h dueHeap) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h dueHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx, h[j].idx = i, j
}
func (h *dueHeap) Push(x any) {
	t := x.(*target)
	t.idx = len(*h)
	*h = append(*h, t)
}
func (h *dueHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	t.idx = -1
	return t
}

// remove takes t out of the heap if it is in it.
func (h *dueHeap) remove(t *target) {
	if t.idx >= 0 {
		heap.Remove(h, t.idx)
	}
}

package controller

import (
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"

	"github.com/kube-ipvs/kube-ipvs/model"
)

// cycleNames hands a repair cycle the Services to recompute, one at a time: every Service
// the proxy held when the cycle began, then every other one the informers have. At 50,000
// Services under emulation, collecting both at the cycle's start held the sync loop for
// 200 ms (an execution trace), and a change waited for it: so only the held names are
// copied then (one tight loop over the map), while the informers' list is taken beside the
// steps and compared with the held Services a name at a time. (A map iterator resumed step
// after step, iter.Pull, would spare the copy, but its coroutine must be switched to with
// the same OS thread locking it was created with, and the steps lock the thread to count
// their CPU time.)
type cycleNames struct {
	held []model.ServiceName
	// listed brings the informers' Services; rest is what is left of them once in.
	listed chan listedServices
	rest   []*corev1.Service
	err    error
	in     bool
}

type listedServices struct {
	svcs []*corev1.Service
	err  error
}

// nameState is what cycleNames.take found.
type nameState int

const (
	nameReady    nameState = iota
	nameSkipping           // only Services the proxy holds so far: call again
	nameWaiting            // the informers' list is not in yet
	namesDone
)

// skipRun bounds how many of the informers' Services one take passes over (because the
// proxy holds them), so that a step can stop at its deadline between runs; skipAhead
// bounds it in more.
const skipRun, skipAhead = 256, 4096

// newCycleNames copies the held names and starts the informers' listing.
func newCycleNames(held map[model.ServiceName]*model.ServiceState, informers corelisters.ServiceLister) *cycleNames {
	n := &cycleNames{held: slices.AppendSeq(make([]model.ServiceName, 0, len(held)), maps.Keys(held)), listed: make(chan listedServices, 1)}
	go func() {
		svcs, err := informers.List(labels.Everything())
		n.listed <- listedServices{svcs, err}
	}()
	return n
}

// take returns the next Service to recompute. held is the proxy's Services now: one the
// informers list that the proxy already holds was taken, or synced by a change, and is not
// taken again. An error is the informers' listing's.
func (n *cycleNames) take(held map[model.ServiceName]*model.ServiceState) (model.ServiceName, nameState, error) {
	if len(n.held) > 0 {
		name := n.held[0]
		n.held = n.held[1:]
		return name, nameReady, nil
	}
	if !n.receive() {
		return model.ServiceName{}, nameWaiting, nil
	}
	if n.err != nil {
		return model.ServiceName{}, namesDone, n.err
	}
	for skipped := 0; len(n.rest) > 0; skipped++ {
		if skipped == skipRun {
			return model.ServiceName{}, nameSkipping, nil
		}
		s := n.rest[0]
		n.rest = n.rest[1:]
		if name := (model.ServiceName{Namespace: s.Namespace, Name: s.Name}); held[name] == nil {
			return name, nameReady, nil
		}
	}
	return model.ServiceName{}, namesDone, nil
}

// more reports whether a Service may be left to take, passing over (up to skipAhead of) the
// informers' Services the proxy holds: false means every one was taken.
func (n *cycleNames) more(held map[model.ServiceName]*model.ServiceState) bool {
	if len(n.held) > 0 || !n.receive() || n.err != nil {
		return true
	}
	for skipped := 0; len(n.rest) > 0; skipped++ {
		if skipped == skipAhead {
			return true
		}
		if s := n.rest[0]; held[model.ServiceName{Namespace: s.Namespace, Name: s.Name}] == nil {
			return true
		}
		n.rest = n.rest[1:]
	}
	return false
}

// receive takes the informers' list if it is in, and reports whether it is.
func (n *cycleNames) receive() bool {
	if !n.in {
		select {
		case l := <-n.listed:
			n.rest, n.err, n.in = l.svcs, l.err, true
		default:
		}
	}
	return n.in
}

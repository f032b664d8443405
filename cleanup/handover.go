package cleanup

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// Handover removes what kube-proxy left on the node once, after the running proxy's first
// full repair (`kube-ipvs run --cleanup-kube-proxy`): only then do kube-ipvs' own rules use
// conntrack and carry the Services, so that removing kube-proxy's rules resets no held
// masqueraded connection (docs/migration.md). An attempt that fails is repeated with
// exponential backoff until one removes everything it selected.
type Handover struct {
	// Attempt lists the kernel and removes kube-proxy's leftovers once (RemoveKubeProxy):
	// it returns the objects it selected, the failed ones with Error set, or an error when
	// the kernel could not be listed (then nothing was removed).
	Attempt func() ([]Object, error)
	// Report hears of every attempt, for the log, the metrics and an Event.
	Report func(Attempt)
	// First is the wait after the first failed attempt; it doubles up to Max.
	First, Max time.Duration
	// After is time.After; tests replace it.
	After func(time.Duration) <-chan time.Time
}

// Attempt is what one try did.
type Attempt struct {
	N       int      // 1 for the first
	Objects []Object // what it selected; the failed ones have Error set
	// Err is why it did not finish: the listing failed, or some objects stayed.
	Err error
	// Retry is the wait before the next attempt; 0 when this one finished the job.
	Retry time.Duration
}

// Removed counts the objects the attempt removed, by kind.
func (a Attempt) Removed() map[string]int {
	n := map[string]int{}
	for _, o := range a.Objects {
		if o.Error == "" {
			n[o.Kind]++
		}
	}
	return n
}

// Run waits until ready is closed (the first full repair is done), then tries until an
// attempt succeeds or ctx ends; it returns nil on success, ctx's error otherwise.
func (h Handover) Run(ctx context.Context, ready <-chan struct{}) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-ready:
	}
	after := h.After
	if after == nil {
		after = time.After
	}
	wait := h.First
	for n := 1; ; n++ {
		objs, err := h.Attempt()
		if failed := Failed(objs); err == nil && len(failed) > 0 {
			err = failedError(failed)
		}
		a := Attempt{N: n, Objects: objs, Err: err}
		if err != nil {
			a.Retry = wait
		}
		h.Report(a)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-after(wait):
		}
		wait = min(2*wait, h.Max)
	}
}

// failedError names every object that stayed and why.
func failedError(failed []Object) error {
	parts := make([]string, len(failed))
	for i, o := range failed {
		parts[i] = o.String() + ": " + o.Error
	}
	return fmt.Errorf("%d of kube-proxy's objects could not be removed: %s", len(failed), strings.Join(parts, "; "))
}

// RemoveKubeProxy is one attempt of `kube-ipvs cleanup --kube-proxy`: it plans kube-proxy's
// chains, the rules that jump to them and its ipsets (never kube-ipvs' objects, virtual
// servers or links) and removes them, returning each object, the failed ones with Error
// set, and the plan's notes.
func RemoveKubeProxy(k Kernel) ([]Object, []string, error) {
	p, err := Make(Config{KubeProxy: true}, k)
	if err != nil {
		return nil, nil, err
	}
	return p.Run(), p.Notes, nil
}

package bench

import (
	"context"
	"fmt"
	"time"
)

// restart stops the controller and starts a new one, with --sync-period's default, onto the
// kernel state the first left: what a restarted Pod (an upgrade, a crash) finds. It must be
// ready (its first sync ended) sooner than the cold start was, and write nothing.
func (r *runner) restart(ctx context.Context) error {
	r.quiet()
	r.stopCtl()
	select {
	case err := <-r.ctlDone:
		if err != nil {
			return fmt.Errorf("restart: the first controller ended with %w", err)
		}
	case <-time.After(r.o.Timeout):
		return fmt.Errorf("restart: the first controller did not stop within %s", r.o.Timeout)
	}
	// A new dataplane (empty caches, new sockets) and controller, as a new process has.
	if err := r.wire(ctx, defaultSyncPeriod); err != nil {
		return fmt.Errorf("restart: %w", err)
	}
	before := r.writes()
	start := time.Now()
	r.start(ctx)
	if err := r.waitKernel(func() (bool, error) { return r.ctl.Stats().TotalSyncs >= 1, nil }, 5*time.Millisecond); err != nil {
		return fmt.Errorf("restart: the first sync did not end: %w", err)
	}
	took := time.Since(start)
	st := r.ctl.Stats()
	s := Sample{Seconds: took.Seconds(), Writes: diff(r.writes(), before), SyncSeconds: st.Duration.Seconds(), PhaseSeconds: phaseSeconds(st.Phases)}
	r.res.Restart = &s
	r.log("restart: ready in %.2fs (cold start %.2fs), writes %v (first sync %.2fs: build %.1fs, firewall %.1fs, addresses %.1fs, ipvs %.1fs)",
		s.Seconds, r.res.ColdStart.Seconds, s.Writes, st.Duration.Seconds(), st.Phases.Build.Seconds(), st.Phases.Firewall.Seconds(),
		st.Phases.Addresses.Seconds(), st.Phases.IPVS.Seconds())
	if w := s.TotalWrites(); w != 0 {
		r.fail("the restart onto matching kernel state wrote %d times: %v", w, s.Writes)
	}
	return nil
}

package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// restart stops the controller and starts a new one, with --sync-period's default, onto the
// kernel state the first left: what a restarted Pod finds. Twice: first as after a crash
// (no handover: every virtual server is read back), then as after a clean stop (an upgrade),
// which leaves a handover (ipvsmode.SaveHandover) for the next. Each must be ready (its
// first sync ended) sooner than the cold start was, and write nothing.
func (r *runner) restart(ctx context.Context) error {
	crash, err := r.restartOnce(ctx, "")
	if err != nil {
		return err
	}
	r.res.RestartNoHandover = crash
	dir, err := os.MkdirTemp("", "kipvs-bench-handover")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	clean, err := r.restartOnce(ctx, filepath.Join(dir, "ipvs-handover"))
	if err != nil {
		return err
	}
	r.res.Restart = clean
	return nil
}

// restartOnce stops the controller and starts a new one; with a handover path the first
// leaves its handover there and the second takes it.
func (r *runner) restartOnce(ctx context.Context, handover string) (*Sample, error) {
	what := "restart without a handover (as after a crash)"
	if handover != "" {
		what = "restart with a handover (a clean stop)"
	}
	r.quiet()
	r.stopCtl()
	select {
	case err := <-r.ctlDone:
		if err != nil {
			return nil, fmt.Errorf("%s: the first controller ended with %w", what, err)
		}
	case <-time.After(r.o.Timeout):
		return nil, fmt.Errorf("%s: the first controller did not stop within %s", what, r.o.Timeout)
	}
	start := time.Now()
	if handover != "" {
		n, err := r.dp.SaveHandover(handover)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		r.log("%s: handover of %d virtual servers written in %.2fs", what, n, time.Since(start).Seconds())
	}
	// A new dataplane (empty caches, new sockets) and controller, as a new process has.
	if err := r.wire(ctx, defaultSyncPeriod); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	before := r.writes()
	start = time.Now()
	if handover != "" {
		if n, err := r.dp.LoadHandover(handover); err != nil || n == 0 {
			return nil, fmt.Errorf("%s: the handover was not taken (%d virtual servers): %v", what, n, err)
		}
	}
	r.start(ctx)
	if err := r.waitKernel(func() (bool, error) { return r.ctl.Stats().TotalSyncs >= 1, nil }, 5*time.Millisecond); err != nil {
		return nil, fmt.Errorf("%s: the first sync did not end: %w", what, err)
	}
	took := time.Since(start)
	st := r.ctl.Stats()
	s := Sample{Seconds: took.Seconds(), Writes: diff(r.writes(), before), SyncSeconds: st.Duration.Seconds(), PhaseSeconds: phaseSeconds(st.Phases)}
	r.log("%s: ready in %.2fs (cold start %.2fs), writes %v (first sync %.2fs: build %.1fs, firewall %.1fs, addresses %.1fs, ipvs %.1fs)",
		what, s.Seconds, r.res.ColdStart.Seconds, s.Writes, st.Duration.Seconds(), st.Phases.Build.Seconds(), st.Phases.Firewall.Seconds(),
		st.Phases.Addresses.Seconds(), st.Phases.IPVS.Seconds())
	if w := s.TotalWrites(); w != 0 {
		r.fail("the %s onto matching kernel state wrote %d times: %v", what, w, s.Writes)
	}
	return &s, nil
}

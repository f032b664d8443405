package controller

import "time"

// schedule decides when the sync loop runs and which kind of sync: a pure type, given the
// time by its caller, so that the timing policy is a table test rather than a reading of
// Run (kube-proxy's bounded-frequency runner is the model).
//
// The policy:
//   - changes are applied at most every minInterval (bursts coalesce);
//   - a full repair runs every period, or repairDutyCycle times its last duration when that
//     is longer; a repair cut into steps (a cycle) gives way to changes between its steps,
//     so that a change waits for one step at most, not for the repair;
//   - failed work is retried with exponential backoff from 1 s up to maxBackoff, and a
//     failed repair (or one asked for, after a Node change) is run again as soon as the
//     backoff allows;
//   - the dataplane's own periodic work (Tick) runs when it asked for it.
type schedule struct {
	minInterval, period, maxBackoff time.Duration

	lastSync, lastFull time.Time
	fullTook           time.Duration // the last successful repair's duration
	fullDue            bool          // a repair is wanted before the period ends
	backoff            time.Duration
	retryAt            time.Time
	tickAt             time.Time // zero: the dataplane wants no Tick
	inCycle            bool      // a repair cycle is under way: its steps are due
}

// repairDutyCycle bounds the share of the sync loop's time the periodic repair may take:
// at a scale where one repair takes longer than period/repairDutyCycle, repairs are spaced
// further apart.
const repairDutyCycle = 5

func newSchedule(minInterval, period, maxBackoff time.Duration) *schedule {
	if maxBackoff == 0 {
		maxBackoff = time.Minute
	}
	return &schedule{minInterval: minInterval, period: period, maxBackoff: maxBackoff, fullDue: true}
}

// work is what the loop should do now.
type work int

const (
	idle    work = iota // nothing: wait (see next)
	tick                // the dataplane's periodic work
	changes             // apply the changed Services and retry failed keys
	full                // recompute everything and repair the kernel
	step                // the next step of the repair cycle under way
)

// decide returns what to do at now, given whether Services changed (dirty) and whether
// failed keys wait for a retry; with idle, wait is how long until something is due.
func (s *schedule) decide(now time.Time, dirty, retries bool) (w work, wait time.Duration) {
	ready := now.Sub(s.lastSync) >= s.minInterval
	retryReady := s.retryAt.IsZero() || !now.Before(s.retryAt)
	interval := s.repairInterval()
	switch {
	case !s.tickAt.IsZero() && !now.Before(s.tickAt):
		return tick, 0
	case s.inCycle && ready && (dirty || (retries && retryReady)):
		return changes, 0
	case s.inCycle:
		return step, 0
	case now.Sub(s.lastFull) >= interval || (s.fullDue && ready && retryReady):
		return full, 0
	case ready && (dirty || (retries && retryReady)):
		return changes, 0
	}
	next := s.lastFull.Add(interval)
	if dirty {
		next = earliest(next, s.lastSync.Add(s.minInterval))
	}
	if retries || s.fullDue {
		next = earliest(next, latest(s.retryAt, s.lastSync.Add(s.minInterval)))
	}
	if !s.tickAt.IsZero() {
		next = earliest(next, s.tickAt)
	}
	return idle, max(next.Sub(now), 0)
}

// repairInterval is the time from the end of one periodic repair to the start of the next.
func (s *schedule) repairInterval() time.Duration {
	return max(s.period, repairDutyCycle*s.fullTook)
}

// synced records a sync that ended at now. failed: some work failed and is retried with
// backoff; wholeFailed (a full sync only): the repair must run again. It reports whether
// this repair made the periodic repairs slower than period for the first time.
func (s *schedule) synced(now time.Time, isFull bool, took time.Duration, failed, wholeFailed bool) (slowed bool) {
	if failed {
		s.backoff = min(max(2*s.backoff, time.Second), s.maxBackoff)
		s.retryAt = now.Add(s.backoff)
	} else {
		s.backoff, s.retryAt = 0, time.Time{}
	}
	s.lastSync = now
	if !isFull {
		return false
	}
	first := s.lastFull.IsZero()
	s.lastFull = now
	s.fullDue = wholeFailed
	if wholeFailed || first {
		// The first full sync programs everything (and pays one-off costs such as
		// detecting the iptables backend): its length says nothing about what repairing
		// intact state costs, so it does not space the repairs.
		return false
	}
	before := s.repairInterval()
	s.fullTook = took
	return before <= s.period && s.repairInterval() > s.period
}

// cycleBegan records that a repair cycle began: its steps come before the next repair.
func (s *schedule) cycleBegan() {
	s.inCycle = true
	s.fullDue = false
}

// cycleEnded records a repair cycle that ended at now, whose steps took busy in all. failed:
// a step failed as a whole, and the repair is run again after a backoff.
func (s *schedule) cycleEnded(now time.Time, busy time.Duration, failed bool) {
	s.inCycle = false
	s.lastFull = now
	if failed {
		s.backoff = min(max(2*s.backoff, time.Second), s.maxBackoff)
		s.retryAt = now.Add(s.backoff)
		s.fullDue = true
		return
	}
	s.fullTook = busy
}

// askFull asks for a repair as soon as the minimum interval and any backoff allow.
func (s *schedule) askFull() { s.fullDue = true }

// ticked records the dataplane's wish: its next Tick in wait (0: none).
func (s *schedule) ticked(now time.Time, wait time.Duration) {
	if wait <= 0 {
		s.tickAt = time.Time{}
		return
	}
	s.tickAt = now.Add(wait)
}

func earliest(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func latest(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

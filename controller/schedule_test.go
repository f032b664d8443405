package controller

import (
	"testing"
	"time"
)

// at is a fixed clock origin: the schedule only compares times it was given.
var at = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func after(d time.Duration) time.Time { return at.Add(d) }

// syncedSchedule brings a new schedule past its first full sync, made at 0.
func syncedSchedule(minInterval, period time.Duration) *schedule {
	s := newSchedule(minInterval, period, 0)
	s.synced(at, true, time.Second, false, false)
	return s
}

func TestScheduleDecides(t *testing.T) {
	const minI, period = 100 * time.Millisecond, 30 * time.Second
	for _, tc := range []struct {
		name           string
		prepare        func(*schedule)
		now            time.Duration
		dirty, retries bool
		want           work
		wait           time.Duration
	}{
		{name: "a new schedule repairs first", prepare: func(s *schedule) { *s = *newSchedule(minI, period, 0) }, want: full},
		{name: "nothing to do: wait for the period", now: time.Second, want: idle, wait: period - time.Second},
		{name: "a change right after a sync waits for the minimum interval", now: 10 * time.Millisecond, dirty: true, want: idle, wait: 90 * time.Millisecond},
		{name: "a change after the minimum interval is applied", now: minI, dirty: true, want: changes},
		{name: "the period ends: repair, even with changes", now: period, dirty: true, want: full},
		{name: "a repair asked for runs after the minimum interval", prepare: func(s *schedule) { s.askFull() }, now: minI, want: full},
		{name: "a repair asked for waits for the minimum interval", prepare: func(s *schedule) { s.askFull() }, now: 0, want: idle, wait: minI},
		{name: "a failed key waits for its backoff", prepare: func(s *schedule) { s.synced(at, false, 0, true, false) },
			now: 500 * time.Millisecond, retries: true, want: idle, wait: 500 * time.Millisecond},
		{name: "a failed key is retried after its backoff", prepare: func(s *schedule) { s.synced(at, false, 0, true, false) },
			now: time.Second, retries: true, want: changes},
		{name: "a change is not held back by another key's backoff", prepare: func(s *schedule) { s.synced(at, false, 0, true, false) },
			now: minI, dirty: true, retries: true, want: changes},
		{name: "the dataplane's tick comes first", prepare: func(s *schedule) { s.ticked(at, time.Second) }, now: time.Second, dirty: true, want: tick},
		{name: "waiting for the tick", prepare: func(s *schedule) { s.ticked(at, time.Second) }, now: 200 * time.Millisecond, want: idle, wait: 800 * time.Millisecond},
		{name: "a slow repair spaces the next one", prepare: func(s *schedule) { s.synced(at, true, 10*time.Second, false, false) },
			now: period, want: idle, wait: 20 * time.Second},
		{name: "a failed repair is run again after its backoff", prepare: func(s *schedule) { s.synced(at, true, time.Second, true, true) },
			now: time.Second, want: full},
		{name: "a repair cycle's steps run when nothing else is due", prepare: func(s *schedule) { s.cycleBegan() },
			now: time.Millisecond, dirty: true, want: step},
		{name: "a change comes before the cycle's next step", prepare: func(s *schedule) { s.cycleBegan() },
			now: minI, dirty: true, want: changes},
		{name: "a cycle under way is not begun again at the period's end", prepare: func(s *schedule) { s.cycleBegan() },
			now: period, want: step},
		{name: "a finished cycle waits for the period", prepare: func(s *schedule) { s.cycleBegan(); s.cycleEnded(after(time.Second), time.Second, false) },
			now: 2 * time.Second, want: idle, wait: period - time.Second},
		{name: "a failed cycle is run again after its backoff", prepare: func(s *schedule) { s.cycleBegan(); s.cycleEnded(at, time.Second, true) },
			now: time.Second, want: full},
		{name: "a repair asked for during a cycle follows it", prepare: func(s *schedule) { s.cycleBegan(); s.askFull(); s.cycleEnded(at, time.Second, false) },
			now: minI, want: full},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := syncedSchedule(minI, period)
			if tc.prepare != nil {
				tc.prepare(s)
			}
			w, wait := s.decide(after(tc.now), tc.dirty, tc.retries)
			if w != tc.want || (w == idle && wait != tc.wait) {
				t.Errorf("decide = %v, wait %s; want %v, wait %s", w, wait, tc.want, tc.wait)
			}
		})
	}
}

// Backoff doubles from 1 s to the maximum, and a success resets it.
func TestScheduleBackoff(t *testing.T) {
	s := newSchedule(0, time.Hour, 8*time.Second)
	var got []time.Duration
	now := at
	for range 5 {
		s.synced(now, false, 0, true, false)
		got = append(got, s.retryAt.Sub(now))
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 8 * time.Second}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("backoffs %v, want %v", got, want)
		}
	}
	s.synced(now, false, 0, false, false)
	if !s.retryAt.IsZero() || s.backoff != 0 {
		t.Fatalf("a success left backoff %s, retry at %v", s.backoff, s.retryAt)
	}
}

// The periodic repair keeps to the period while it is quick, and is spaced so that it takes
// at most a fifth of the loop's time when it is not (changes wait while it runs); the first
// repair to slow the period down says so, once.
func TestRepairIntervalBoundsTheRepairsShare(t *testing.T) {
	const period = 30 * time.Second
	for _, tc := range []struct {
		took, want time.Duration
		slowed     bool
	}{
		{0, period, false},
		{2 * time.Second, period, false},
		{6 * time.Second, period, false},
		{10 * time.Second, 50 * time.Second, true},
		{95 * time.Second, 475 * time.Second, true},
	} {
		s := newSchedule(0, period, 0)
		if s.synced(at, true, 10*tc.took, false, false) || s.repairInterval() != period {
			t.Errorf("the first full sync (a cold start of %s) spaced the repairs: %s", 10*tc.took, s.repairInterval())
		}
		slowed := s.synced(at, true, tc.took, false, false)
		if got := s.repairInterval(); got != tc.want || slowed != tc.slowed {
			t.Errorf("a repair of %s: interval %s, slowed %v; want %s, %v", tc.took, got, slowed, tc.want, tc.slowed)
		}
		if share := float64(tc.took) / float64(tc.took+s.repairInterval()); share > 0.2 {
			t.Errorf("a repair of %s every %s takes %.0f%% of the time", tc.took, s.repairInterval(), 100*share)
		}
		if again := s.synced(after(time.Hour), true, tc.took, false, false); again {
			t.Errorf("a second slow repair of %s warned again", tc.took)
		}
	}
}

func (w work) String() string {
	return [...]string{"idle", "tick", "changes", "full"}[w]
}

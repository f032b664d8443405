package controller

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// A full sync and a slow incremental one log where their time went, in parts and on the
// thread (CPU, run-queue wait); a fast incremental one keeps its line short.
func TestSyncLogShowsPhasesWhenSlow(t *testing.T) {
	var buf bytes.Buffer
	c := &Controller{log: slog.New(slog.NewTextHandler(&buf, nil))}
	phases := FullSyncPhases{Build: 2 * time.Millisecond, Firewall: 3 * time.Millisecond, IPVS: 1500 * time.Millisecond}
	for _, tc := range []struct {
		name   string
		st     Stats
		phases bool
	}{
		{"slow incremental", Stats{Duration: 2 * time.Second, Phases: phases}, true},
		{"fast incremental", Stats{Duration: 20 * time.Millisecond, Phases: phases}, false},
		{"full", Stats{Full: true, Duration: 20 * time.Millisecond, Phases: phases}, true},
	} {
		buf.Reset()
		c.logSync(tc.st, threadTime{CPU: 40 * time.Millisecond, RunQueue: 1200 * time.Millisecond})
		line := buf.String()
		if got := strings.Contains(line, "took_ipvs=1.5s"); got != tc.phases {
			t.Errorf("%s: phases logged %v, want %v: %s", tc.name, got, tc.phases, line)
		}
		if got := strings.Contains(line, "cpu=40ms runqueue_wait=1.2s"); got != tc.phases {
			t.Errorf("%s: thread times logged %v, want %v: %s", tc.name, got, tc.phases, line)
		}
	}
}

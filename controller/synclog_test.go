package controller

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// A full sync and a slow incremental one log where their time went; a fast incremental
// one keeps its line short.
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
		c.logSync(tc.st)
		line := buf.String()
		if got := strings.Contains(line, "took_ipvs=1.5s"); got != tc.phases {
			t.Errorf("%s: phases logged %v, want %v: %s", tc.name, got, tc.phases, line)
		}
	}
}

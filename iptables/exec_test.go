package iptables

import (
	"strings"
	"testing"
	"time"
)

// A tool that hangs is killed at the timeout and reported, so the sync loop goes on and
// retries instead of waiting for ever.
func TestOSExecKillsAHungTool(t *testing.T) {
	start := time.Now()
	_, err := OSExec{Timeout: 200 * time.Millisecond}.Run(nil, "sleep", "30")
	took := time.Since(start)
	if err == nil || !strings.Contains(err.Error(), "killed after 200ms") {
		t.Fatalf("err = %v; want the hung tool killed after 200ms", err)
	}
	if took > 20*time.Second {
		t.Errorf("Run returned after %s; the tool was not killed", took)
	}
	out, err := OSExec{}.Run([]byte("in"), "cat")
	if err != nil || string(out) != "in" {
		t.Errorf("a quick tool: %q, %v", out, err)
	}
}

package iptables

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"time"
)

// Exec runs the iptables tools. OSExec is the real one; FakeExec emulates them in memory.
type Exec interface {
	// LookPath reports whether a tool is installed (exec.LookPath).
	LookPath(name string) (string, error)
	// Run runs a tool with stdin (nil for none) and returns its standard output; a failure
	// is an error that includes the tool's standard error.
	Run(stdin []byte, name string, args ...string) ([]byte, error)
}

// OSExec runs the tools as processes. They inherit the calling thread's network namespace.
type OSExec struct {
	// Timeout bounds one run (DefaultToolTimeout when zero). A tool that hangs (seen with
	// iptables-restore on an overloaded emulated node) would otherwise stop the sync loop
	// for good; killed, it is an error and the work is retried. Killing a restore is safe:
	// both backends apply a table in one commit at its end, so nothing half-written stays.
	Timeout time.Duration
}

// DefaultToolTimeout is far above any run the proxy makes: its rules do not grow with the
// number of Services, and iptables-save of a busy node takes seconds.
const DefaultToolTimeout = time.Minute

// LookPath implements Exec.
func (OSExec) LookPath(name string) (string, error) { return exec.LookPath(name) }

// Run implements Exec.
func (e OSExec) Run(stdin []byte, name string, args ...string) ([]byte, error) {
	timeout := e.Timeout
	if timeout <= 0 {
		timeout = DefaultToolTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.WaitDelay = time.Second // do not wait on pipes a killed tool's children may hold
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			err = fmt.Errorf("killed after %s: %w", timeout, err)
		}
		return stdout.Bytes(), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.Bytes(), nil
}

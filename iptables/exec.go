package iptables

import (
	"bytes"
	"fmt"
	"os/exec"
	"strings"
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
type OSExec struct{}

// LookPath implements Exec.
func (OSExec) LookPath(name string) (string, error) { return exec.LookPath(name) }

// Run implements Exec.
func (OSExec) Run(stdin []byte, name string, args ...string) ([]byte, error) {
	cmd := exec.Command(name, args...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.Bytes(), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.Bytes(), nil
}

package netnstest

import (
	"os/exec"
	"strings"
	"testing"
)

// Run runs a tool (ipset, iptables-save, ipvsadm, ...) and returns its combined output; it
// fails the test with that output when the tool fails. Called from the test's goroutine
// after EnterNew, the tool runs in the test's namespace: it is started from the locked
// thread and inherits its namespace.
func Run(t testing.TB, name string, args ...string) string {
	t.Helper()
	return run(t, exec.Command(name, args...))
}

// RunStdin is Run with stdin fed to the tool (iptables-restore, ipset restore).
func RunStdin(t testing.TB, stdin, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Stdin = strings.NewReader(stdin)
	return run(t, cmd)
}

func run(t testing.TB, cmd *exec.Cmd) string {
	t.Helper()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, out)
	}
	return string(out)
}

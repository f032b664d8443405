// Package netnstest puts a test in a network namespace of its own, so that real-kernel tests
// (on the host and in the guest) never see or change the namespace they were started in, and
// runs the tools those tests cross-check the kernel with (Run, RunStdin).
package netnstest

import (
	"os"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// EnterNew moves the calling goroutine's thread into a new, empty network namespace for the
// rest of the test; processes the test starts (ipset, iptables) inherit it. The thread stays
// locked, so when the test's goroutine ends the runtime ends the thread with it and nothing
// else ever runs in that namespace. It fails (never skips) when the namespace cannot be
// made, and refuses to go on in the original one.
func EnterNew(t testing.TB) {
	t.Helper()
	before, err := os.Readlink("/proc/thread-self/ns/net")
	if err != nil {
		t.Fatalf("read own network namespace: %v", err)
	}
	runtime.LockOSThread() // never unlocked: see above
	if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
		t.Fatalf("unshare(CLONE_NEWNET): %v (kernel tests need root: CAP_SYS_ADMIN and CAP_NET_ADMIN)", err)
	}
	after, err := os.Readlink("/proc/thread-self/ns/net")
	if err != nil || after == before {
		t.Fatalf("still in network namespace %s after unshare (%v): refusing to touch it", before, err)
	}
}

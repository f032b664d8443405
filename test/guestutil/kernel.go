package guestutil

import (
	"testing"

	"golang.org/x/sys/unix"

	"github.com/kube-ipvs/kube-ipvs/sysctl"
)

// KernelRelease is the running kernel's release (uname -r), e.g. "6.12.43+deb13-amd64".
func KernelRelease(t testing.TB) string {
	t.Helper()
	var uts unix.Utsname
	if err := unix.Uname(&uts); err != nil {
		t.Fatalf("uname: %v", err)
	}
	return unix.ByteSliceToString(uts.Release[:])
}

// KernelAtLeast reports whether the running kernel is major.minor or newer. The guest boots
// several kernel generations (GUEST_KERNEL=5.10|6.1|6.12); a test of behaviour that differs
// between them asserts the outcome of the kernel it runs on, both ways.
func KernelAtLeast(t testing.TB, major, minor int) bool {
	t.Helper()
	rel := KernelRelease(t)
	maj, min, ok := sysctl.Version(rel)
	if !ok {
		t.Fatalf("cannot parse the kernel release %q", rel)
	}
	return maj > major || maj == major && min >= minor
}

// Package guestutil holds helpers for tests that run inside the kube-ipvs test guest (a QEMU
// virtual machine booting Debian's kernel, see hack/guest). Such tests carry the build tag
// "guest" and call RequireGuest first, so they can never program the host's own kernel.
package guestutil

import (
	"os"
	"strings"
	"testing"
)

// guestMarker is on the kernel command line of every guest the bench boots.
const guestMarker = "kipvs.guest=1"

// InGuest reports whether this process runs inside the test guest.
func InGuest() bool {
	b, err := os.ReadFile("/proc/cmdline")
	if err != nil {
		return false
	}
	for _, f := range strings.Fields(string(b)) {
		if f == guestMarker {
			return true
		}
	}
	return false
}

// RequireGuest fails the test (never skips it: a skipped kernel test proves nothing) unless it
// runs inside the test guest.
func RequireGuest(t testing.TB) {
	t.Helper()
	if !InGuest() {
		t.Fatalf("this test programs the kernel and runs only inside the test guest (make guest-test); "+
			"%s is not on /proc/cmdline", guestMarker)
	}
}

// WriteSysctl sets a sysctl by its dotted name, e.g. "net.ipv4.ip_forward".
func WriteSysctl(t testing.TB, name, value string) {
	t.Helper()
	path := "/proc/sys/" + strings.ReplaceAll(name, ".", "/")
	if err := os.WriteFile(path, []byte(value), 0o644); err != nil {
		t.Fatalf("sysctl %s=%s: %v", name, value, err)
	}
}

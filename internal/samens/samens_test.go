package samens

import (
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"github.com/vishvananda/netns"

	"github.com/kube-ipvs/kube-ipvs/test/netnstest"
)

// fn runs, and on a thread in the caller's namespace (the host test cannot enter another
// without privileges, so this checks the plain case: the same namespace as the caller).
func TestGoRunsInTheCallersNamespace(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	mine, err := netns.Get()
	if err != nil {
		t.Fatalf("no namespace handle: %v", err)
	}
	defer mine.Close()
	done := make(chan bool)
	Go(func() {
		cur, err := netns.Get()
		if err != nil {
			done <- false
			return
		}
		defer cur.Close()
		done <- cur.Equal(mine)
	})
	if !<-done {
		t.Error("fn ran in another namespace")
	}
}

// From a thread that entered a namespace of its own, fn runs in that namespace, and so does
// a process fn starts; a plain goroutine would land on a thread of the process's namespace.
func TestGoFollowsAnEnteredNamespace(t *testing.T) {
	outer, err := os.Readlink("/proc/thread-self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	netnstest.EnterNew(t)
	inner, _ := os.Readlink("/proc/thread-self/ns/net")
	type seen struct{ thread, process string }
	done := make(chan seen)
	Go(func() {
		var s seen
		s.thread, _ = os.Readlink("/proc/thread-self/ns/net")
		out, _ := exec.Command("readlink", "/proc/self/ns/net").Output()
		s.process = strings.TrimSpace(string(out))
		done <- s
	})
	s := <-done
	if s.thread != inner || s.process != inner {
		t.Errorf("fn's thread in %s, its process in %s; want %s (the caller's), not %s", s.thread, s.process, inner, outer)
	}
}

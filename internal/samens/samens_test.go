package samens

import (
	"runtime"
	"testing"

	"github.com/vishvananda/netns"
)

// fn runs, and on a thread in the caller's namespace (the host test cannot enter another
// without privileges, so this checks the plain case: the same namespace as the caller).
func TestGoRunsInTheCallersNamespace(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	mine, err := netns.Get()
	if err != nil {
		t.Skipf("no namespace handle here: %v", err)
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

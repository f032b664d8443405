// Package samens starts goroutines in the network namespace of the thread that starts them.
//
// A network namespace belongs to an OS thread, not to a process: a goroutine may run on any
// thread, and a process it starts (iptables-restore, say) inherits its thread's namespace.
// The proxy itself runs wholly in one namespace, but code that enters a namespace on one
// locked thread (the guest tests' nodes) must not have its work moved to another: Go starts
// fn on a thread locked to the caller's namespace.
package samens

import (
	"runtime"

	"github.com/vishvananda/netns"
)

// Go runs fn on a new goroutine, on a thread in the caller's network namespace. If that
// namespace cannot be read or entered, fn runs where the goroutine lands (the process's
// namespace, which is the caller's unless the caller entered another).
func Go(fn func()) {
	origin, err := netns.Get()
	go func() {
		if err == nil {
			defer origin.Close()
			runtime.LockOSThread()
			if cur, cerr := netns.Get(); cerr == nil {
				same := cur.Equal(origin)
				cur.Close()
				if same {
					runtime.UnlockOSThread()
				} else if netns.Set(origin) != nil {
					// The thread is in no known state: it stays locked, and ends with the
					// goroutine rather than serve others.
					fn()
					return
				}
				// Entered: the thread stays locked and ends with the goroutine, so that no
				// other goroutine runs in this namespace by chance.
			}
		}
		fn()
	}()
}

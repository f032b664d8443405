// Package lockwalk walks a map that its owner goes on changing under a lock, from another
// goroutine, holding the lock for a bounded number of keys at a time.
//
// The repair's background work needs every key of maps with tens of thousands of entries
// (the desired virtual servers, the IPVS cache). Copying such a map under its lock costs
// its owner (the sync loop) the whole copy at once, and allocates it while the garbage
// collector may be marking (which charges the copy with mark work); at 70,000 virtual
// servers under emulation that held the loop for hundreds of milliseconds. Walking it here
// holds the lock for Chunk keys, then lets the owner in.
//
// Go's map iteration is defined while the map changes: an entry deleted before it is
// reached is not produced, an entry added may or may not be, every other entry is produced
// once. Each step of the iteration runs with the lock held, so the changes made between
// chunks are ordered with it as if one goroutine made them inside the loop.
package lockwalk

import (
	"runtime"
	"sync"
)

// Chunk is how many keys a walk takes per holding of the lock.
const Chunk = 1024

// Keys calls yield with every key of the map that m returns (called with l held), holding
// l for at most Chunk keys at a time, until yield returns false. yield runs with l held: it
// must not take l, nor anything its owner takes while holding l.
func Keys[K comparable, V any](l sync.Locker, m func() map[K]V, yield func(K) bool) {
	l.Lock()
	n := 0
	for k := range m() {
		if !yield(k) {
			break
		}
		if n++; n%Chunk == 0 {
			l.Unlock()
			runtime.Gosched()
			l.Lock()
		}
	}
	l.Unlock()
}

// Collect appends every key Keys walks to dst.
func Collect[K comparable, V any](dst []K, l sync.Locker, m func() map[K]V) []K {
	Keys(l, m, func(k K) bool {
		dst = append(dst, k)
		return true
	})
	return dst
}

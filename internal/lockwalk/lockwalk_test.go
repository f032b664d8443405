package lockwalk

import (
	"sync"
	"testing"
)

// A walk beside an owner that deletes and adds keys between chunks produces every key that
// was there throughout exactly once and none twice (run with -race: the owner's changes
// and the walk are ordered by the lock alone).
func TestKeysBesideAnOwnerThatChangesTheMap(t *testing.T) {
	var mu sync.Mutex
	m := map[int]bool{}
	const n = 20 * Chunk
	for i := range n {
		m[i] = true
	}
	kept := func(i int) bool { return i%3 != 0 } // the owner deletes every third key
	got := map[int]int{}
	ownerTurns := 0
	walked := make(chan struct{})
	step := make(chan struct{})
	go func() {
		defer close(walked)
		taken := 0
		Keys(&mu, func() map[int]bool { return m }, func(k int) bool {
			got[k]++
			if taken++; taken == Chunk {
				close(step) // the owner starts changing the map once a chunk is in
			}
			return true
		})
	}()
	<-step
	for i := 0; i < n; i += 3 {
		mu.Lock()
		delete(m, i)
		m[n+i] = true // added keys may or may not be produced
		ownerTurns++
		mu.Unlock()
	}
	<-walked
	for i := range n {
		if kept(i) && got[i] != 1 {
			t.Fatalf("key %d, there throughout, produced %d times", i, got[i])
		}
		if got[i] > 1 {
			t.Fatalf("key %d produced %d times", i, got[i])
		}
	}
	if ownerTurns != (n+2)/3 {
		t.Fatalf("the owner changed the map %d times, want %d", ownerTurns, (n+2)/3)
	}
}

// Collect stops nowhere and a yield that returns false stops the walk.
func TestCollectAndStop(t *testing.T) {
	var mu sync.Mutex
	m := map[string]int{"a": 1, "b": 2, "c": 3}
	if got := Collect(nil, &mu, func() map[string]int { return m }); len(got) != 3 {
		t.Fatalf("collected %v", got)
	}
	seen := 0
	Keys(&mu, func() map[string]int { return m }, func(string) bool { seen++; return false })
	if seen != 1 {
		t.Fatalf("a walk told to stop went on: %d keys", seen)
	}
	if !mu.TryLock() {
		t.Fatal("the walk left the lock held")
	}
}

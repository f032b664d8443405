package foreground

import (
	"testing"
	"time"
)

// yielding runs g.Yield in a goroutine and returns a channel closed when it returns.
func yielding(g *Gate) <-chan struct{} {
	done := make(chan struct{})
	go func() { g.Yield(); close(done) }()
	return done
}

func waitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: Yield did not return", what)
	}
}

func TestYieldPassesWhileTheGateIsDown(t *testing.T) {
	g := NewGate()
	before := g.Parks()
	waitClosed(t, yielding(g), "gate down")
	if g.Parks() != before {
		t.Fatalf("Yield parked with the gate down")
	}
}

func TestYieldParksUntilTheGateIsLowered(t *testing.T) {
	g := &Gate{hold: time.Hour}
	t.Cleanup(g.Lower)
	g.Raise()
	before := g.Parks()
	done := yielding(g)
	for g.Parks() == before {
		time.Sleep(time.Millisecond)
	}
	select {
	case <-done:
		t.Fatalf("Yield returned with the gate up")
	default:
	}
	g.Raise() // already up: no new deadline, no new channel
	g.Lower()
	waitClosed(t, done, "gate lowered")
	if g.Up() {
		t.Fatalf("the gate is up after Lower")
	}
}

func TestARaisedGateHoldsAtMostItsHold(t *testing.T) {
	g := &Gate{hold: 20 * time.Millisecond}
	t.Cleanup(g.Lower)
	g.Raise()
	start := time.Now()
	waitClosed(t, yielding(g), "hold ran out")
	if took := time.Since(start); took < g.hold {
		t.Fatalf("Yield returned after %v, before the hold of %v ran out", took, g.hold)
	}
	// The gate is still up, but its hold has run out: the background goes on.
	before := g.Parks()
	waitClosed(t, yielding(g), "after the hold")
	if g.Parks() != before {
		t.Fatalf("Yield parked again on a gate whose hold ran out")
	}
}

func TestGatesAreIndependentAndANilGateNeverParks(t *testing.T) {
	a, b := &Gate{hold: time.Hour}, NewGate()
	t.Cleanup(a.Lower)
	a.Raise()
	if b.Up() {
		t.Fatalf("raising one gate raised another")
	}
	waitClosed(t, yielding(b), "another gate")
	var none *Gate
	none.Raise()
	if none.Up() {
		t.Fatalf("a nil gate is up")
	}
	waitClosed(t, yielding(none), "nil gate")
	if a.Parks() != 0 || b.Parks() != 0 || none.Parks() != 0 {
		t.Fatalf("parks: %d %d %d, want none", a.Parks(), b.Parks(), none.Parks())
	}
}

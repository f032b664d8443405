package foreground

import (
	"testing"
	"time"
)

// yielding runs Yield in a goroutine and returns a channel closed when it returns.
func yielding() <-chan struct{} {
	done := make(chan struct{})
	go func() { Yield(); close(done) }()
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
	Lower()
	before := Parks()
	waitClosed(t, yielding(), "gate down")
	if Parks() != before {
		t.Fatalf("Yield parked with the gate down")
	}
}

func TestYieldParksUntilTheGateIsLowered(t *testing.T) {
	hold = time.Hour
	t.Cleanup(func() { Lower(); hold = MaxHold })
	Raise()
	before := Parks()
	done := yielding()
	for Parks() == before {
		time.Sleep(time.Millisecond)
	}
	select {
	case <-done:
		t.Fatalf("Yield returned with the gate up")
	default:
	}
	Raise() // already up: no new deadline, no new channel
	Lower()
	waitClosed(t, done, "gate lowered")
	if Up() {
		t.Fatalf("the gate is up after Lower")
	}
}

func TestARaisedGateHoldsAtMostItsHold(t *testing.T) {
	hold = 20 * time.Millisecond
	t.Cleanup(func() { Lower(); hold = MaxHold })
	Raise()
	start := time.Now()
	waitClosed(t, yielding(), "hold ran out")
	if took := time.Since(start); took < hold {
		t.Fatalf("Yield returned after %v, before the hold of %v ran out", took, hold)
	}
	// The gate is still up, but its hold has run out: the background goes on.
	before := Parks()
	waitClosed(t, yielding(), "after the hold")
	if Parks() != before {
		t.Fatalf("Yield parked again on a gate whose hold ran out")
	}
}

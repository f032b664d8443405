package backendcheck

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/kube-ipvs/kube-ipvs/model"
)

// fakeClock moves only when told; After channels fire when Advance passes their time.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	waiters []fakeWaiter
}

type fakeWaiter struct {
	at time.Time
	ch chan time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Unix(1_000_000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- c.now
		return ch
	}
	c.waiters = append(c.waiters, fakeWaiter{c.now.Add(d), ch})
	return ch
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	kept := c.waiters[:0]
	for _, w := range c.waiters {
		if !w.at.After(c.now) {
			w.ch <- c.now
			continue
		}
		kept = append(kept, w)
	}
	c.waiters = kept
}

// idle reports whether every target of the checker waits for its next check: none is
// being checked or about to be recorded (a prober counts a probe before the checker
// records it, so a test must not move the clock before this holds).
func (c *Checker) idle() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, s := range c.services {
		n += len(s.targets)
	}
	return len(c.due) == n
}

// fakeProber answers from a table (endpoint -> failing) and counts its probes.
type fakeProber struct {
	mu      sync.Mutex
	failing map[model.RSKey]bool
	probes  map[model.RSKey]int
	total   int
}

func newFakeProber() *fakeProber {
	return &fakeProber{failing: map[model.RSKey]bool{}, probes: map[model.RSKey]int{}}
}

func (p *fakeProber) Probe(_ context.Context, _ *model.HealthCheck, ep model.RSKey) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.probes[ep]++
	p.total++
	if p.failing[ep] {
		return errors.New("connection refused")
	}
	return nil
}

func (p *fakeProber) setFailing(ep model.RSKey, f bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.failing[ep] = f
}

func (p *fakeProber) count(ep model.RSKey) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.probes[ep]
}

func (p *fakeProber) all() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.total
}

// verdicts collects reported verdicts.
type verdicts struct {
	mu   sync.Mutex
	list []Verdict
}

func (v *verdicts) add(x Verdict) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.list = append(v.list, x)
}

func (v *verdicts) get() []Verdict {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]Verdict(nil), v.list...)
}

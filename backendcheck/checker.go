// Package backendcheck runs the opt-in health checks of Services' endpoints from the node
// (annotation kube-ipvs.io/health-check; package proxy reads it into model.HealthCheck).
// It decides nothing about weights: it reports verdict changes, and the controller feeds
// them to the pure desired-state function as an input, like an EndpointSlice change.
//
// Cost is bounded: only annotated Services are checked; one scheduling goroutine keeps the
// targets in a heap by due time and hands due ones to a fixed pool of workers (the global
// concurrency limit), with no goroutine per endpoint or per interval; schedules are
// jittered so that checks spread over time.
package backendcheck

import (
	"container/heap"
	"context"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/kube-ipvs/kube-ipvs/model"
)

// DefaultWorkers is the default global limit of checks running at once.
const DefaultWorkers = 32

// Verdict is a change of one endpoint's state.
type Verdict struct {
	Service  model.ServiceName
	Endpoint model.RSKey
	Healthy  bool
	Err      string // the last check's error, when it turned unhealthy
}

// Observer receives the checker's metrics. Calls come from several goroutines.
type Observer interface {
	ObserveBackendCheck(svc model.ServiceName, took time.Duration)
	SetBackendCheckCounts(svc model.ServiceName, checked, unhealthy int)
	ForgetBackendChecks(svc model.ServiceName)
}

// Options configure New; zero fields take defaults.
type Options struct {
	Workers  int            // DefaultWorkers
	Prober   Prober         // NewNetProber()
	Clock    Clock          // the real clock
	Rand     func() float64 // uniform in [0, 1); math/rand/v2
	Observer Observer       // none
}

// Checker checks the endpoints of the Services it was given (Set) until they are removed.
type Checker struct {
	opts Options
	wake chan struct{}
	jobs chan *target

	mu       sync.Mutex
	services map[model.ServiceName]*service
	due      dueHeap
	report   func(Verdict)
}

type service struct {
	name      model.ServiceName
	hc        *model.HealthCheck // replaced, never modified
	targets   map[model.RSKey]*target
	unhealthy int
}

type target struct {
	svc      *service
	ep       model.RSKey
	h        health
	due      time.Time
	idx      int  // in Checker.due; -1 when not there
	inflight bool // a worker is checking it
	gone     bool // removed by Set or Remove
	lastErr  string
	lastAt   time.Time
}

// New returns a checker; call Run to start checking.
func New(o Options) *Checker {
	if o.Workers <= 0 {
		o.Workers = DefaultWorkers
	}
	if o.Prober == nil {
		o.Prober = NewNetProber()
	}
	if o.Clock == nil {
		o.Clock = realClock{}
	}
	if o.Rand == nil {
		o.Rand = rand.Float64
	}
	return &Checker{opts: o, wake: make(chan struct{}, 1), jobs: make(chan *target),
		services: map[model.ServiceName]*service{}}
}

// Set gives the checker a Service's check (nil: stop checking it). Endpoints it already
// checks keep their state; new ones start unhealthy if startDown says so (what the kernel
// showed after a restart) and healthy otherwise, and are first checked at a random time
// within one interval. Its cost follows the Service's endpoints only.
func (c *Checker) Set(name model.ServiceName, hc *model.HealthCheck, startDown map[model.RSKey]bool) {
	if hc == nil {
		c.Remove(name)
		return
	}
	c.mu.Lock()
	s := c.services[name]
	if s == nil {
		s = &service{name: name, targets: map[model.RSKey]*target{}}
		c.services[name] = s
	}
	s.hc = hc
	want := make(map[model.RSKey]bool, len(hc.Targets))
	added := false
	now := c.opts.Clock.Now()
	for _, ep := range hc.Targets {
		want[ep] = true
		if s.targets[ep] != nil {
			continue
		}
		t := &target{svc: s, ep: ep, h: health{healthy: !startDown[ep]}, due: firstDue(now, hc.Interval, c.opts.Rand()), idx: -1}
		if !t.h.healthy {
			s.unhealthy++
		}
		s.targets[ep] = t
		heap.Push(&c.due, t)
		added = true
	}
	for ep, t := range s.targets {
		if !want[ep] {
			c.drop(t)
		}
	}
	checked, unhealthy := len(s.targets), s.unhealthy
	c.mu.Unlock()
	if o := c.opts.Observer; o != nil {
		o.SetBackendCheckCounts(name, checked, unhealthy)
	}
	if added {
		c.poke()
	}
}

// Remove stops checking a Service.
func (c *Checker) Remove(name model.ServiceName) {
	c.mu.Lock()
	s := c.services[name]
	if s != nil {
		for _, t := range s.targets {
			c.drop(t)
		}
		delete(c.services, name)
	}
	c.mu.Unlock()
	if s != nil && c.opts.Observer != nil {
		c.opts.Observer.ForgetBackendChecks(name)
	}
}

// drop forgets a target (c.mu held). A check in flight finishes and is ignored.
func (c *Checker) drop(t *target) {
	t.gone = true
	c.due.remove(t)
	if !t.h.healthy {
		t.svc.unhealthy--
	}
	delete(t.svc.targets, t.ep)
}

func (c *Checker) poke() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// Run checks until ctx ends, calling report for every verdict change (from a worker
// goroutine; it must not block for long).
func (c *Checker) Run(ctx context.Context, report func(Verdict)) {
	c.mu.Lock()
	c.report = report
	c.mu.Unlock()
	var wg sync.WaitGroup
	for range c.opts.Workers {
		wg.Go(func() { c.work(ctx) })
	}
	c.schedule(ctx)
	wg.Wait()
}

// idleWait is how long the scheduler sleeps with nothing to check (Set wakes it sooner).
const idleWait = time.Hour

// schedule hands due targets to the workers, one at a time: when every worker is busy it
// waits, which is the concurrency limit; checks then run late rather than pile up.
func (c *Checker) schedule(ctx context.Context) {
	for {
		c.mu.Lock()
		now := c.opts.Clock.Now()
		var next *target
		wait := idleWait
		if len(c.due) > 0 {
			if d := c.due[0].due.Sub(now); d <= 0 {
				next = heap.Pop(&c.due).(*target)
				next.inflight = true
			} else {
				wait = d
			}
		}
		c.mu.Unlock()
		if next != nil {
			select {
			case c.jobs <- next:
				continue
			case <-ctx.Done():
				return
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-c.wake:
		case <-c.opts.Clock.After(wait):
		}
	}
}

func (c *Checker) work(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case t := <-c.jobs:
			c.check(ctx, t)
		}
	}
}

// check probes one target and records the result.
func (c *Checker) check(ctx context.Context, t *target) {
	c.mu.Lock()
	hc := t.svc.hc
	c.mu.Unlock()
	start := c.opts.Clock.Now()
	pctx, cancel := context.WithTimeout(ctx, hc.Timeout)
	err := c.opts.Prober.Probe(pctx, hc, t.ep)
	cancel()
	end := c.opts.Clock.Now()
	if o := c.opts.Observer; o != nil {
		o.ObserveBackendCheck(t.svc.name, end.Sub(start))
	}
	if ctx.Err() != nil {
		return // shutting down: not the endpoint's fault
	}
	c.record(t, err, end)
}

// record applies a check result to t, schedules its next check and reports a verdict.
func (c *Checker) record(t *target, err error, now time.Time) {
	c.mu.Lock()
	t.inflight = false
	if t.gone {
		c.mu.Unlock()
		return
	}
	hc := t.svc.hc
	t.lastAt, t.lastErr = now, ""
	if err != nil {
		t.lastErr = err.Error()
	}
	changed := t.h.observe(err == nil, hc.HealthyThreshold, hc.UnhealthyThreshold)
	if changed && t.h.healthy {
		t.svc.unhealthy--
	} else if changed {
		t.svc.unhealthy++
	}
	t.due = nextDue(now, hc.Interval, c.opts.Rand())
	heap.Push(&c.due, t)
	v := Verdict{Service: t.svc.name, Endpoint: t.ep, Healthy: t.h.healthy, Err: t.lastErr}
	checked, unhealthy, report := len(t.svc.targets), t.svc.unhealthy, c.report
	c.mu.Unlock()
	c.poke() // the new due time may be the earliest
	if !changed {
		return
	}
	if o := c.opts.Observer; o != nil {
		o.SetBackendCheckCounts(v.Service, checked, unhealthy)
	}
	if report != nil {
		report(v)
	}
}

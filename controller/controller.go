// Package controller is the proxy's control loop: it watches Services, EndpointSlices,
// ServiceCIDRs and this proxy's Node through ListerWatchers (an API server's or the
// manifests source's: informers.go, sources.go, servicecidrs.go), tracks which Services changed, computes their desired
// state with package proxy and resolves it across Services (state.go), and drives one
// dataplane.Dataplane: incrementally for changes, with a full repair every sync period
// (sync.go), at the times a pure schedule decides (schedule.go). Observers hear what it
// did (observe.go); Services hear what was wrong with them as Events (events.go).
package controller

import (
	"context"
	"log/slog"
	"net/netip"
	"runtime/trace"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"

	"github.com/kube-ipvs/kube-ipvs/backendcheck"
	"github.com/kube-ipvs/kube-ipvs/dataplane"
	"github.com/kube-ipvs/kube-ipvs/model"
)

// Controller is the proxy's control loop. Create it with New, then call Run or SyncOnce.
type Controller struct {
	// Set by New, read-only after.
	cfg       Config
	dp        dataplane.Dataplane
	hostAddrs func() ([]netip.Addr, error)
	recorder  record.EventRecorder
	log       *slog.Logger
	obs       Observers
	src       sources
	wake      chan struct{}

	// mu guards what the informers' handlers write (the queue of changes) and what other
	// goroutines read (Stats).
	mu       sync.Mutex
	dirty    map[model.ServiceName]bool
	triggers map[model.ServiceName][]trigger // EndpointSlice change times not yet programmed
	// pendingSvc and pendingEps are the changes not yet taken by a sync, as kube-proxy counts
	// them: Services with a change of their own, and EndpointSlice changes.
	pendingSvc  map[model.ServiceName]bool
	pendingEps  int
	nodeChanged bool
	// cidrsChanged: a ServiceCIDR object changed; the firewall needs a repair.
	cidrsChanged bool
	stats        Stats
	verdicts     []backendcheck.Verdict // health-check verdicts not yet taken by a sync

	// The sync goroutine's own.
	sched       *schedule
	retryVS     map[model.VSKey]bool
	retryIP     map[netip.Addr]bool
	problems    *problemReporter
	unavailable map[string]bool // schedulers the kernel refused
	node        nodeView
	healthErr   map[model.ServiceName]string
	checks      *backendChecks
	setEntries  int
	families    []string // the IP families last given to the metrics (noteFamilies)
	// lastCIDRs are the Service CIDRs of the last repair, for a log line when they change.
	lastCIDRs       []netip.Prefix
	lastCIDRsLogged bool
	// cycle is the periodic repair under way in steps (nil: none); repairedOnce says a
	// whole repair succeeded, after which repairs are cut into steps (repaircycle.go).
	cycle        *repairCycle
	repairedOnce bool
	// built is what each Service's state was last built from (buildinputs.go).
	built map[model.ServiceName]buildInputs

	// drifted is set (by the dataplane's watcher goroutine) when drift waits for RepairDrift.
	drifted atomic.Bool

	// stateMu guards state against readers on other goroutines (LookupVS, for metrics
	// scrapes); only the sync goroutine writes it.
	stateMu sync.RWMutex
	state   *desiredState
}

// nodeView is what the last full sync read about this node.
type nodeView struct {
	zone    string
	nodeIPs []netip.Addr        // addresses with NodePort virtual servers
	host    map[netip.Addr]bool // every address of the node's interfaces but kube-ipvs0's
}

// Stats describes the last sync, for logs and tests.
type Stats struct {
	Full         bool
	Services     int // Services recomputed
	IPVSWrites   int
	AddrWrites   int
	SetWrites    int
	Restores     int
	Errors       int
	Duration     time.Duration
	TotalSyncs   int
	VirtualSrvrs int
	// Phases is where the sync's time went: the log shows it for a full sync and for a slow
	// incremental one, so that an operator can see what a slow sync is made of.
	Phases FullSyncPhases
}

// FullSyncPhases are the durations of a sync's steps. In a full sync Addresses and IPVS run
// at the same time, so it took about Build + Firewall + the longer of the two; an
// incremental sync runs them one after the other.
type FullSyncPhases struct {
	Build, Firewall, Addresses, IPVS time.Duration
}

// New wires a controller to a clientset (an API server's) and to the dataplane of the
// proxy's mode. hostAddrs lists the node's addresses on every interface but kube-ipvs0.
func New(cfg Config, client kubernetes.Interface, dp dataplane.Dataplane, hostAddrs func() ([]netip.Addr, error),
	recorder record.EventRecorder, obs Observers, log *slog.Logger) (*Controller, error) {
	lws, err := ClientListerWatchers(client)
	if err != nil {
		return nil, err
	}
	return NewFromListerWatchers(cfg, lws, dp, hostAddrs, recorder, obs, log)
}

// SyncOnce waits for the informers, makes one full sync and reports whether it succeeded.
func (c *Controller) SyncOnce(ctx context.Context) error {
	if err := c.src.start(ctx); err != nil {
		return err
	}
	c.waitServiceCIDRs(ctx)
	return c.sync(true)
}

// Run syncs until ctx ends, when the schedule says: changes after at most MinSyncPeriod, a
// full repair every SyncPeriod (or further apart when a repair takes long; after the first,
// cut into steps with changes between them), failed kernel calls again with exponential
// backoff, and the dataplane's periodic work; drift the dataplane hears of (WatchDrift)
// is repaired at once.
func (c *Controller) Run(ctx context.Context) error {
	if err := c.src.start(ctx); err != nil {
		return err
	}
	c.waitServiceCIDRs(ctx)
	if ch := c.cfg.BackendChecks; ch != nil {
		go ch.Run(ctx, c.onVerdict)
	}
	defer c.cfg.Gate.Lower()
	go c.dp.WatchDrift(ctx, func() { c.drifted.Store(true); c.poke() })
	c.waitWatching(ctx)
	for {
		if c.drifted.Swap(false) {
			c.repairDrift()
		}
		c.mu.Lock()
		dirty := len(c.dirty) > 0
		if c.nodeChanged || c.cidrsChanged {
			c.nodeChanged, c.cidrsChanged = false, false
			c.sched.askFull()
		}
		c.mu.Unlock()
		retries := len(c.retryVS) > 0 || len(c.retryIP) > 0
		w, wait := c.sched.decide(time.Now(), dirty, retries)
		// The background (a repair's listings) gives way while changes are due; a change
		// that is not due yet (--min-sync-period) does not hold it.
		if w == changes {
			c.cfg.Gate.Raise()
		} else {
			c.cfg.Gate.Lower()
		}
		switch w {
		case tick:
			res, next := c.dp.Tick()
			c.sched.ticked(time.Now(), next)
			c.noteResult(res)
			continue
		case step:
			if pause := time.Until(c.cycle.resumeAt); pause > 0 {
				if !c.pause(ctx, pause) {
					return nil
				}
				continue
			}
			c.cycleStep()
			continue
		case full:
			if c.repairsInSteps() {
				trace.WithRegion(ctx, "begin repair cycle", c.beginCycle)
				continue
			}
			trace.WithRegion(ctx, "full sync", func() { _ = c.sync(true) }) // errors are logged and retried inside
			continue
		case changes:
			trace.WithRegion(ctx, "sync changes", func() { _ = c.sync(false) })
			continue
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case <-c.wake:
		case <-timer.C:
		}
		timer.Stop()
	}
}

// pause waits for d, a change (wake) or the end of ctx; false: ctx ended.
func (c *Controller) pause(ctx context.Context, d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-c.wake:
	case <-timer.C:
	}
	return true
}

// Stats returns the statistics of the last sync.
func (c *Controller) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}

// LookupVS tells which Service and port own a virtual server: for per-Service metrics. It
// may be called from any goroutine.
func (c *Controller) LookupVS(key model.VSKey) (model.ServiceName, string, bool) {
	c.stateMu.RLock()
	defer c.stateMu.RUnlock()
	owner, ok := c.state.vsOwner[key]
	if !ok {
		return model.ServiceName{}, "", false
	}
	s := c.state.services[owner]
	if s == nil || s.VSes[key] == nil {
		return model.ServiceName{}, "", false
	}
	return owner, s.VSes[key].PortName, true
}

// watchStartWait bounds how long the first sync waits for the drift notifications to be
// live: the first sync lists the VIPs, and a listing made before the subscription is not
// trusted, so the first repair cycle would list every VIP again in one step (seconds at
// 10,000 Services under emulation), holding changes up.
const watchStartWait = 2 * time.Second

func (c *Controller) waitWatching(ctx context.Context) {
	deadline := time.Now().Add(watchStartWait)
	for !c.dp.Watching() && ctx.Err() == nil && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
}

package dummyif

import (
	"context"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// Drift is what the kernel's notifications said happened to the dummy link since the last
// Watcher.Take. It is the whole interface between a watcher and whoever repairs: a binding
// of Service addresses other than by address (local routes, say) would add its own fields.
type Drift struct {
	// Lost: the link was deleted or re-created, or notifications may have been missed (the
	// subscription failed and was made again): look the link up and list its addresses.
	Lost bool
	// Removed are addresses that were removed from the link (by anyone: the repair
	// compares them with what is to be bound).
	Removed []netip.Addr
}

// Event is one notification about a link, an address, or one of the proxy's local routes.
type Event struct {
	Link      bool // a link's event
	Route     bool // a route's event (only the proxy's: RouteProtocol, the local table)
	Deleted   bool // the link, address or route was deleted
	Down      bool // link events only: the link is not up
	LinkIndex int
	LinkName  string     // link events only
	Addr      netip.Addr // address events: the address; route events: the route's destination
}

// Subscription is a live subscription to link and address notifications: Events until it
// fails or done is closed, when Events is closed.
type Subscription struct {
	Events <-chan Event
}

// Subscribe subscribes to link and address notifications until done is closed.
type Subscribe func(done <-chan struct{}) (Subscription, error)

// resubscribeBackoff bounds the wait before subscribing again after a failure.
const resubscribeBackoff = 5 * time.Second

// Watcher hears about the dummy link from netlink notifications (an address removed, the
// link deleted or re-created) and keeps the drift for Take: a repair within a second, and
// no listing of every address every period. It subscribes again when the subscription
// fails, and reports Lost then, since notifications may have been missed meanwhile.
type Watcher struct {
	name      string
	subscribe Subscribe
	index     func(name string) (int, error)
	// routes: the VIPs are bound as local routes (BindRoute): a removed route is drift, and
	// so is the link going down, which takes its routes away.
	routes bool

	mu    sync.Mutex
	drift Drift
	// epoch numbers the subscriptions, 0 while none is live: a listing of the link's
	// addresses made while epoch e was live is complete as long as Epoch still says e.
	epoch, count atomic.Uint64
}

// NewWatcher watches the dummy link of that name in the current network namespace, and the
// VIPs as the binding binds them (addresses, or the proxy's local routes).
func NewWatcher(name string, b Binding) *Watcher {
	nl := newKernelNetlink()
	sub := kernelSubscribe
	if b == BindRoute {
		sub = kernelSubscribeRoutes
	}
	w := NewWatcherWith(name, sub, func(n string) (int, error) {
		l, err := nl.LinkByName(n)
		return l.Index, err
	})
	w.routes = b == BindRoute
	return w
}

// NewWatcherWith is NewWatcher (address binding) over a given subscription and link look-up
// (fakes in tests).
func NewWatcherWith(name string, subscribe Subscribe, index func(string) (int, error)) *Watcher {
	return &Watcher{name: name, subscribe: subscribe, index: index}
}

// WatchRoutes makes the watcher follow the route binding (see Watcher.routes).
func (w *Watcher) WatchRoutes() *Watcher {
	w.routes = true
	return w
}

// FollowsRoutes says whether the watcher follows the route binding.
func (w *Watcher) FollowsRoutes() bool { return w.routes }

// Epoch is the live subscription's number, 0 when none is live.
func (w *Watcher) Epoch() uint64 { return w.epoch.Load() }

// Take returns the drift heard since the last Take and forgets it.
func (w *Watcher) Take() Drift {
	w.mu.Lock()
	defer w.mu.Unlock()
	d := w.drift
	w.drift = Drift{}
	return d
}

// Run watches until ctx ends, calling drifted (on Run's goroutine) after recording drift.
func (w *Watcher) Run(ctx context.Context, drifted func()) {
	backoff := time.Duration(0)
	for ctx.Err() == nil {
		failed := w.watchOnce(ctx, drifted)
		w.epoch.Store(0)
		if !failed {
			backoff = 0
		} else {
			backoff = min(max(2*backoff, 100*time.Millisecond), resubscribeBackoff)
		}
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
	}
}

// watchOnce subscribes and handles events until the subscription ends; it reports whether
// subscribing failed. Every subscription after the first reports Lost.
func (w *Watcher) watchOnce(ctx context.Context, drifted func()) (failed bool) {
	done := make(chan struct{})
	defer close(done)
	sub, err := w.subscribe(done)
	if err != nil {
		return true
	}
	index, err := w.index(w.name) // after subscribing: a change from now on is heard
	if err != nil {
		index = 0 // no link yet: its creation is heard
	}
	n := w.count.Add(1)
	w.epoch.Store(n)
	if n > 1 {
		w.record(drifted, func(d *Drift) { d.Lost = true })
	}
	for {
		select {
		case <-ctx.Done():
			return false
		case ev, ok := <-sub.Events:
			if !ok {
				return false
			}
			index = w.handle(ev, index, drifted)
		}
	}
}

// handle records what one event says about the link whose index is index, and returns the
// link's index after it.
func (w *Watcher) handle(ev Event, index int, drifted func()) int {
	switch {
	case ev.Link && ev.LinkName == w.name && ev.Deleted:
		w.record(drifted, func(d *Drift) { d.Lost = true })
		return 0
	case ev.Link && ev.LinkName == w.name && ev.LinkIndex != index:
		if index != 0 {
			w.record(drifted, func(d *Drift) { d.Lost = true }) // deleted and made again
		}
		return ev.LinkIndex
	case ev.Link && ev.LinkName == w.name && ev.Down && w.routes && index != 0:
		// A link that is down loses its local routes, not always with a notification each.
		w.record(drifted, func(d *Drift) { d.Lost = true })
	case !ev.Link && ev.Route == w.routes && ev.Deleted && index != 0 && ev.LinkIndex == index:
		w.record(drifted, func(d *Drift) { d.Removed = append(d.Removed, ev.Addr) })
	}
	return index
}

func (w *Watcher) record(drifted func(), fn func(*Drift)) {
	w.mu.Lock()
	fn(&w.drift)
	w.mu.Unlock()
	drifted()
}

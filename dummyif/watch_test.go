package dummyif

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"sync/atomic"
	"testing"
	"time"
)

// fakeSubscriptions hands out subscriptions whose events the test sends; ending one (end)
// is a failed subscription, as a socket buffer overrun is.
type fakeSubscriptions struct {
	subs  chan chan Event
	fails atomic.Int32 // fail this many Subscribe calls first
}

func (f *fakeSubscriptions) subscribe(done <-chan struct{}) (Subscription, error) {
	if f.fails.Load() > 0 {
		f.fails.Add(-1)
		return Subscription{}, errors.New("no socket")
	}
	ch := make(chan Event, 16)
	f.subs <- ch
	return Subscription{Events: ch}, nil
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestWatcherReportsRemovedAddressesAndALostLink(t *testing.T) {
	f := &fakeSubscriptions{subs: make(chan chan Event, 4)}
	f.fails.Store(1) // the first subscription fails: the watcher tries again
	w := NewWatcherWith("kube-ipvs0", f.subscribe, func(string) (int, error) { return 7, nil })
	var heard atomic.Int32
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.Run(ctx, func() { heard.Add(1) })

	ev := <-f.subs
	waitFor(t, "a live subscription", func() bool { return w.Epoch() == 1 })
	a, b := netip.MustParseAddr("10.96.0.1"), netip.MustParseAddr("fd00::1")
	ev <- Event{Deleted: true, LinkIndex: 7, Addr: a}
	ev <- Event{Deleted: true, LinkIndex: 3, Addr: netip.MustParseAddr("192.0.2.1")} // another link
	ev <- Event{LinkIndex: 7, Addr: netip.MustParseAddr("10.96.0.9")}                // an add
	ev <- Event{Deleted: true, LinkIndex: 7, Addr: b}
	waitFor(t, "two removals heard", func() bool { return heard.Load() == 2 })
	if d := w.Take(); d.Lost || !slices.Equal(d.Removed, []netip.Addr{a, b}) {
		t.Fatalf("drift %+v, want removed %v and %v only", d, a, b)
	}

	ev <- Event{Link: true, Deleted: true, LinkIndex: 7, LinkName: "kube-ipvs0"}
	waitFor(t, "the link's deletion heard", func() bool { return heard.Load() == 3 })
	if d := w.Take(); !d.Lost {
		t.Fatalf("drift %+v after the link was deleted, want Lost", d)
	}
	// Made again (by the repair) under a new index: its addresses are followed there.
	ev <- Event{Link: true, LinkIndex: 9, LinkName: "kube-ipvs0"}
	ev <- Event{Deleted: true, LinkIndex: 9, Addr: a}
	waitFor(t, "a removal on the new link", func() bool { return heard.Load() == 4 })
	if d := w.Take(); d.Lost || !slices.Equal(d.Removed, []netip.Addr{a}) {
		t.Fatalf("drift %+v, want %v removed from the re-created link", d, a)
	}

	// The subscription fails: the next one reports Lost, since events may have been missed.
	close(ev)
	<-f.subs
	waitFor(t, "a second subscription", func() bool { return w.Epoch() == 2 })
	waitFor(t, "the lost events reported", func() bool { return heard.Load() == 5 })
	if d := w.Take(); !d.Lost {
		t.Fatalf("drift %+v after re-subscribing, want Lost", d)
	}
}

// A repair from what the notifications heard binds again what was removed behind the cache,
// without listing the link.
func TestRepairFromDriftBindsAgainWhatWasRemovedBehindTheCache(t *testing.T) {
	f := NewFakeNetlink()
	r := NewWithNetlink(name, f)
	if res := resync(r, map[netip.Addr]bool{v4a: true, v6a: true}); res.Err != nil {
		t.Fatal(res.Err)
	}
	f.DropAddr(name, pfx("10.96.0.1/32"))
	f.TakeOps()
	if res := r.Apply([]netip.Addr{v4a}, nil); res.Writes != 0 {
		t.Fatalf("Apply wrote %d times: it trusts its cache, the test relies on that", res.Writes)
	}
	want := WantAll(map[netip.Addr]bool{v4a: true, v6a: true})
	res := r.Repair(want, &Drift{Removed: []netip.Addr{v4a, v4a}}, nil)
	if res.Writes != 1 || res.Err != nil || len(res.Errors) > 0 {
		t.Fatalf("Repair from drift: %+v, want one write", res)
	}
	expectOps(t, f, "addr-add 2 10.96.0.1/32 flags=0x0")
	expectAddrs(t, f, name, "10.96.0.1/32", "fd00:96::1/128 flags=0x2")
}

// With the route binding, a removed local route of the proxy's is drift and so is the link
// going down (its local routes go with it); address events are not (there are none of the
// proxy's), and a link going down does not matter to addresses.
func TestRouteWatcherReportsRemovedRoutesAndALinkDown(t *testing.T) {
	f := &fakeSubscriptions{subs: make(chan chan Event, 4)}
	w := NewWatcherWith("kube-ipvs0", f.subscribe, func(string) (int, error) { return 7, nil }).WatchRoutes()
	var heard atomic.Int32
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.Run(ctx, func() { heard.Add(1) })
	ev := <-f.subs
	waitFor(t, "a live subscription", func() bool { return w.Epoch() == 1 })
	a := netip.MustParseAddr("10.96.0.1")
	ev <- Event{Deleted: true, LinkIndex: 7, Addr: netip.MustParseAddr("10.96.0.2")} // an address
	ev <- Event{Route: true, Deleted: true, LinkIndex: 7, Addr: a}
	waitFor(t, "a route removal heard", func() bool { return heard.Load() == 1 })
	if d := w.Take(); d.Lost || !slices.Equal(d.Removed, []netip.Addr{a}) {
		t.Fatalf("drift %+v, want only the route to %v removed", d, a)
	}
	ev <- Event{Link: true, Down: true, LinkIndex: 7, LinkName: "kube-ipvs0"}
	waitFor(t, "the link down heard", func() bool { return heard.Load() == 2 })
	if d := w.Take(); !d.Lost {
		t.Fatalf("drift %+v after the link went down, want Lost", d)
	}

	// The address binding ignores both.
	g := &fakeSubscriptions{subs: make(chan chan Event, 4)}
	aw := NewWatcherWith("kube-ipvs0", g.subscribe, func(string) (int, error) { return 7, nil })
	var aheard atomic.Int32
	go aw.Run(ctx, func() { aheard.Add(1) })
	aev := <-g.subs
	waitFor(t, "a live subscription", func() bool { return aw.Epoch() == 1 })
	aev <- Event{Link: true, Down: true, LinkIndex: 7, LinkName: "kube-ipvs0"}
	aev <- Event{Route: true, Deleted: true, LinkIndex: 7, Addr: a}
	aev <- Event{Deleted: true, LinkIndex: 7, Addr: a}
	waitFor(t, "the address removal heard", func() bool { return aheard.Load() == 1 })
	if d := aw.Take(); d.Lost || !slices.Equal(d.Removed, []netip.Addr{a}) {
		t.Fatalf("address watcher drift %+v, want only the address %v", d, a)
	}
}

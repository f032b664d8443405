package dummyif

import (
	"fmt"
	"net/netip"

	"golang.org/x/sys/unix"
)

// The fake's Routes: each link keeps the proxy's local routes (foreign routes are the
// kernel's business, never listed). Fail sees the ops link-up, route-list, route-add and
// route-del, with the prefix as argument for the last two.

// PutRoute adds one of the proxy's local routes directly, without logging a call.
func (f *FakeNetlink) PutRoute(name string, p netip.Prefix) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.links[name].routes[p] = 0
}

// Routes lists the proxy's local routes through a link, sorted; nil when the link does not
// exist.
func (f *FakeNetlink) Routes(name string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	l, ok := f.links[name]
	if !ok {
		return nil
	}
	return prefixLines(l.routes)
}

// IsUp says whether a link is up.
func (f *FakeNetlink) IsUp(name string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	l, ok := f.links[name]
	return ok && l.Up
}

func (f *FakeNetlink) LinkSetUp(linkIndex int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("link-up", "", fmt.Sprint(linkIndex)); err != nil {
		return err
	}
	l := f.byIndex(linkIndex)
	if l == nil {
		return fmt.Errorf("set link %d up: %w", linkIndex, unix.ENODEV)
	}
	l.Up = true
	return nil
}

func (f *FakeNetlink) LocalRouteList(linkIndex int) ([]netip.Prefix, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("route-list", "", fmt.Sprint(linkIndex)); err != nil {
		return nil, err
	}
	l := f.byIndex(linkIndex)
	if l == nil {
		return nil, fmt.Errorf("list local routes of link %d: %w", linkIndex, unix.ENODEV)
	}
	out := make([]netip.Prefix, 0, len(l.routes))
	for p := range l.routes {
		out = append(out, p)
	}
	return out, nil
}

func (f *FakeNetlink) LocalRouteAdd(linkIndex int, p netip.Prefix) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	l, err := f.routeCall("route-add", linkIndex, p)
	_, have := l.routes[p]
	switch {
	case err != nil:
		return err
	case p.Addr().Is6() && !l.Up:
		return fmt.Errorf("add local route %s through link %d: %w", p, linkIndex, unix.ENETDOWN)
	case have:
		return fmt.Errorf("add local route %s through link %d: %w", p, linkIndex, ErrAddrExists)
	}
	l.routes[p] = 0
	return nil
}

func (f *FakeNetlink) LocalRouteDel(linkIndex int, p netip.Prefix) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	l, err := f.routeCall("route-del", linkIndex, p)
	if err != nil {
		return err
	}
	if _, have := l.routes[p]; !have {
		return fmt.Errorf("remove local route %s through link %d: %w", p, linkIndex, ErrAddrNotFound)
	}
	delete(l.routes, p)
	return nil
}

// routeCall logs a route write and finds its link (an empty one on error, so that its
// routes can be read).
func (f *FakeNetlink) routeCall(op string, linkIndex int, p netip.Prefix) (*fakeLink, error) {
	if err := f.call(op, p.String(), fmt.Sprintf("%d %s", linkIndex, p)); err != nil {
		return &fakeLink{}, err
	}
	l := f.byIndex(linkIndex)
	if l == nil {
		return &fakeLink{}, fmt.Errorf("%s %s through link %d: %w", op, p, linkIndex, unix.ENODEV)
	}
	return l, nil
}

// lastIPv4Gone does what the kernel does when a link loses its last IPv4 address: it
// deletes every IPv4 route through it.
func (l *fakeLink) lastIPv4Gone() {
	for p := range l.addrs {
		if p.Addr().Is4() {
			return
		}
	}
	for p := range l.routes {
		if p.Addr().Is4() {
			delete(l.routes, p)
		}
	}
}

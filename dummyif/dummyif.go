// Package dummyif keeps the addresses of the dummy link that holds the service VIPs
// (kube-ipvs0 in production), so the node accepts traffic to them as local and IPVS sees it.
// With BindRoute it keeps local routes through the link instead (binding.go, routes.go).
//
// Up or down: with BindAddress the link is created down and its state is never changed (with
// BindRoute it is set up). In the guest kernel (Debian 6.1) a down dummy link still gets a
// "local" route for every address, IPv4 and IPv6, and a pod reaches both a listener on such a VIP and an IPVS virtual server on it
// (TestGuestBoundVIPIsLocalWithLinkDown here and the IPVS traffic tests of package ipvs
// prove it on every run). IPv6 addresses are added with IFA_F_NODAD: a dummy link is NOARP,
// so the kernel skips DAD for it anyway, but the flag states the intent and keeps an address
// from ever waiting out DAD. Down, as kube-proxy keeps it, the link gets no IPv6 link-local
// address, no multicast route and no routes in the main table, so it attracts no traffic
// beyond its own addresses.
//
// Only the named link is ever written; a link of that name that is not a dummy is refused.
package dummyif

import (
	"errors"
	"fmt"
	"iter"
	"maps"
	"net/netip"
	"slices"
	"sort"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// ErrNotDummy is wrapped by the error for a link of the reconciler's name that is not a
// dummy link: it belongs to someone else and is left alone.
var ErrNotDummy = errors.New("link exists and is not a dummy link")

// listAttempts bounds how often a repair lists again after an interrupted listing.
const listAttempts = 3

// Result reports one Apply or Repair.
type Result struct {
	// Writes is how many kernel write calls were made (successful or not): Added of them
	// created the link or bound an address, Removed unbound one.
	Writes, Added, Removed int
	// Errors holds, per address, what went wrong with it; other addresses were still done.
	Errors map[netip.Addr]error
	// Err is set when the operation as a whole failed (link missing or not a dummy, address
	// listing failed).
	Err error
}

// Reconciler binds and unbinds addresses on one dummy link. It is safe for concurrent use;
// calls are serialized.
type Reconciler struct {
	mu     sync.Mutex
	name   string
	nl     Netlink
	index  int                 // the link's index, 0 before the first look-up
	stale  bool                // a write failed: look the link up again before the next one
	bound  map[netip.Addr]bool // addresses we know the link has, as /32 or /128
	writes atomic.Uint64

	vips  VIPs // how VIPs are bound
	other VIPs // the other binding, whose VIPs the first listing repair converts
	// converted is set once a listing repair found none of other's VIPs left on the link.
	converted bool
}

// New returns a Reconciler for the dummy link of that name, over the kernel's netlink in the
// current network namespace (the one socket it opens stays there).
func New(name string) *Reconciler { return NewWithNetlink(name, newKernelNetlink()) }

// NewWithNetlink returns a Reconciler over the given Netlink (a FakeNetlink in tests).
func NewWithNetlink(name string, nl Netlink) *Reconciler {
	return NewBinding(name, BindAddress, nl)
}

// NewBinding returns a Reconciler that binds VIPs the way b says, over nl (nil: the
// kernel's in the current network namespace). Its first Repair converts the VIPs bound
// the other way (a restart that changed --vip-binding): it binds them this way first, then
// unbinds them the other way, so every VIP stays local throughout.
func NewBinding(name string, b Binding, nl Netlink) *Reconciler {
	if nl == nil {
		nl = newKernelNetlink()
	}
	other := BindRoute
	if b == BindRoute {
		other = BindAddress
	}
	return &Reconciler{name: name, nl: nl, vips: VIPsFor(b, nl), other: VIPsFor(other, nl), bound: map[netip.Addr]bool{}}
}

// Writes returns the number of kernel write calls made so far.
func (r *Reconciler) Writes() uint64 { return r.writes.Load() }

// Addresses returns the addresses the reconciler knows are bound, sorted.
func (r *Reconciler) Addresses() []netip.Addr {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.SortedFunc(maps.Keys(r.bound), netip.Addr.Compare)
}

// IsBound reports whether the reconciler knows a is bound: a lookup, where a copy of tens of
// thousands of addresses would hold its caller (a repair step) for the copy.
func (r *Reconciler) IsBound(a netip.Addr) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.bound[a]
}

// EnsureLink creates the dummy link, down, if it is missing. A link of that name that is not
// a dummy is an error wrapping ErrNotDummy, and is not touched.
func (r *Reconciler) EnsureLink() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	var res Result
	return r.link(true, &res)
}

// link finds the link (creating it if create is set) and records its index. A changed index
// means the link was re-created: the cached addresses are forgotten.
func (r *Reconciler) link(create bool, res *Result) error {
	l, err := r.nl.LinkByName(r.name)
	if errors.Is(err, ErrLinkNotFound) && create {
		res.Writes++
		res.Added++
		r.writes.Add(1)
		if err := r.nl.AddDummy(r.name); err != nil && !errors.Is(err, unix.EEXIST) {
			return err
		}
		l, err = r.nl.LinkByName(r.name)
	}
	if err != nil {
		return err
	}
	if l.Type != "dummy" {
		return fmt.Errorf("%s is a %s link: %w", r.name, l.Type, ErrNotDummy)
	}
	if l.Index != r.index {
		r.bound = map[netip.Addr]bool{}
	}
	if r.vips.NeedsUp() && !l.Up {
		res.Writes++
		r.writes.Add(1)
		if err := r.nl.LinkSetUp(l.Index); err != nil {
			return err
		}
	}
	r.index, r.stale = l.Index, false
	return nil
}

// Apply binds and unbinds addresses, binds first. It works from its cache: binding a bound
// address or unbinding an absent one makes no kernel call. It does not create the link (that
// is EnsureLink's and Repair's job).
func (r *Reconciler) Apply(bind, unbind []netip.Addr) Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	res := Result{}
	toBind, toUnbind := map[netip.Addr]bool{}, map[netip.Addr]bool{}
	for _, a := range bind {
		toBind[a] = true
	}
	for _, a := range unbind {
		if toBind[a] {
			res.fail(a, fmt.Errorf("%s is both bound and unbound in one Apply", a))
			delete(toBind, a)
			continue
		}
		toUnbind[a] = true
	}
	if r.stale {
		// A write failed last time: check the link (it may have been re-created, which
		// empties the cache) before deciding what to do.
		if err := r.link(false, &res); err != nil {
			res.Err = err
			return res
		}
	}
	var adds, dels []netip.Addr
	for a := range toBind {
		if err := check(a); err != nil {
			res.fail(a, err)
		} else if !r.bound[a] {
			adds = append(adds, a)
		}
	}
	for a := range toUnbind {
		if r.bound[a] {
			dels = append(dels, a)
		}
	}
	if len(adds)+len(dels) == 0 {
		return res
	}
	if r.index == 0 {
		if err := r.link(false, &res); err != nil {
			res.Err = err
			return res
		}
	}
	sortAddrs(adds)
	sortAddrs(dels)
	for _, a := range adds {
		r.add(a, &res)
	}
	for _, a := range dels {
		r.del(host(a), &res)
	}
	return res
}

// Want is the VIPs a repair makes the link hold.
type Want struct {
	// Bound says whether an address is to be bound.
	Bound func(netip.Addr) bool
	// All returns every address to be bound (those mapped to true): only a repair that
	// lists the link reads it, since it copies tens of thousands of addresses.
	All func() map[netip.Addr]bool
}

// WantAll is the Want of the addresses desired maps to true.
func WantAll(desired map[netip.Addr]bool) Want {
	return Want{Bound: func(a netip.Addr) bool { return desired[a] }, All: func() map[netip.Addr]bool { return desired }}
}

// Repair is the link's one repair: it learns what the kernel holds, then writes the
// difference with want, each VIP as a /32 or /128. It writes nothing when the link is
// right.
//
// Without heard (nil), or when heard says notifications were lost, it lists the link,
// creating it if missing: what the kernel holds is the listing. It replaces wrong versions
// of desired VIPs (another prefix length, or an IPv6 address stuck tentative or failed
// DAD), binds the missing ones, unbinds the others, and converts the VIPs bound the other
// way. found (when not nil) is told, before anything is written, which addresses the link
// had, exactly once (nil when the link could not be listed): the caller can work out which
// virtual servers were the proxy's while the addresses are written. IPv6 link-local
// addresses, which the kernel manages on an up link, are left alone.
//
// With heard, the notifications were live since the last listing: what the kernel holds is
// the cache less what they said was removed (heard.Removed), and of those, the wanted ones
// are bound again, without reading the link. No other link is ever touched.
func (r *Reconciler) Repair(want Want, heard *Drift, found func(map[netip.Addr]bool)) Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	if heard != nil && !heard.Lost {
		var res Result
		if r.index == 0 || r.stale {
			if err := r.link(false, &res); err != nil {
				res.Err = err
				return res
			}
		}
		for _, a := range heard.Removed {
			delete(r.bound, a)
		}
		r.converge(slices.Values(heard.Removed), want.Bound, nil, nil, &res)
		return res
	}
	return r.relist(want.All(), found)
}

// relist is Repair from a listing of the link (r.mu held).
func (r *Reconciler) relist(desired map[netip.Addr]bool, found func(map[netip.Addr]bool)) Result {
	tell := func(m map[netip.Addr]bool) {
		if found != nil {
			found(m)
			found = nil
		}
	}
	defer tell(nil)
	res := Result{}
	if err := r.link(true, &res); err != nil {
		res.Err = err
		return res
	}
	listed, err := r.list(r.vips)
	if err != nil {
		res.Err = err
		r.stale = true
		return res
	}
	stale, err := r.listOther()
	if err != nil {
		res.Err = err // the VIPs are still made right; the next listing converts
	}
	if found != nil {
		m := make(map[netip.Addr]bool, len(listed)+len(stale))
		for _, a := range append(slices.Clip(listed), stale...) {
			m[a.Prefix.Addr()] = true
		}
		tell(m)
	}
	have, wrong, extra := classify(listed, desired)
	r.bound = have
	r.converge(maps.Keys(desired), func(a netip.Addr) bool { return desired[a] }, wrong, extra, &res)
	if len(stale) > 0 {
		r.unbindOther(stale, err == nil, &res)
		if r.vips.Binding() == BindRoute {
			r.rebindLost(desired, &res)
		}
	}
	if err == nil && len(stale) == 0 {
		r.converted = true
	}
	return res
}

// classify sorts a listing of the link: the desired VIPs it holds rightly, the wrong
// versions of desired ones, and the extras.
func classify(listed []Address, desired map[netip.Addr]bool) (have map[netip.Addr]bool, wrong, extra []netip.Prefix) {
	have = map[netip.Addr]bool{}
	for _, a := range listed {
		addr := a.Prefix.Addr()
		switch {
		case addr.Is6() && addr.IsLinkLocalUnicast():
		case !desired[addr]:
			extra = append(extra, a.Prefix)
		case a.Prefix.Bits() != addr.BitLen() || (addr.Is6() && a.Flags&(unix.IFA_F_TENTATIVE|unix.IFA_F_DADFAILED) != 0):
			wrong = append(wrong, a.Prefix)
		default:
			have[addr] = true
		}
	}
	return have, wrong, extra
}

// converge writes what the kernel lacks, given what the cache says it holds rightly:
// wrong versions go first (the kernel refuses a second IPv6 address that differs only in
// prefix length), then the candidates that are wanted and not bound are bound, then the
// extras go (r.mu held).
func (r *Reconciler) converge(candidates iter.Seq[netip.Addr], wanted func(netip.Addr) bool, wrong, extra []netip.Prefix, res *Result) {
	sortPrefixes(wrong)
	for _, p := range wrong {
		r.del(p, res)
	}
	var adds []netip.Addr
	for a := range candidates {
		if !wanted(a) {
			continue
		}
		if err := check(a); err != nil {
			res.fail(a, err)
		} else if !r.bound[a] {
			adds = append(adds, a)
		}
	}
	sortAddrs(adds)
	for _, a := range slices.Compact(adds) {
		r.add(a, res)
	}
	sortPrefixes(extra)
	for _, p := range extra {
		r.del(p, res)
	}
}

// rebindLost binds again the desired VIPs that a conversion lost: the kernel deletes every
// IPv4 route through a link whose last IPv4 address is removed (fib_inetaddr_event disables
// IP on it), so the routes bound before the addresses were removed are gone again. They are
// back after as many route writes (2 s for 20,000 under emulation); held connections
// survive it by retransmitting.
func (r *Reconciler) rebindLost(desired map[netip.Addr]bool, res *Result) {
	listed, err := r.list(r.vips)
	if err != nil {
		res.Err = err
		r.stale = true
		return
	}
	have := make(map[netip.Addr]bool, len(listed))
	for _, a := range listed {
		have[a.Prefix.Addr()] = true
	}
	var adds []netip.Addr
	for a, want := range desired {
		if want && r.bound[a] && !have[a] {
			adds = append(adds, a)
		}
	}
	sortAddrs(adds)
	for _, a := range adds {
		delete(r.bound, a)
		r.add(a, res)
	}
}

// listOther lists, until a repair converted them, the VIPs bound the other way (IPv6
// link-local addresses, the kernel's on an up link, left out).
func (r *Reconciler) listOther() ([]Address, error) {
	if r.converted {
		return nil, nil
	}
	listed, err := r.list(r.other)
	if err != nil {
		return nil, fmt.Errorf("listing VIPs bound by %s to convert them: %w", r.other.Binding(), err)
	}
	return slices.DeleteFunc(listed, func(a Address) bool {
		return a.Prefix.Addr().Is6() && a.Prefix.Addr().IsLinkLocalUnicast()
	}), nil
}

// unbindOther removes the VIPs bound the other way, once the desired ones are bound this
// way; the conversion is done when they were all listed and removed.
func (r *Reconciler) unbindOther(stale []Address, listed bool, res *Result) {
	failed := len(res.Errors)
	ps := make([]netip.Prefix, len(stale))
	for i, a := range stale {
		ps[i] = a.Prefix
	}
	sortPrefixes(ps)
	for _, p := range ps {
		res.Writes++
		res.Removed++
		r.writes.Add(1)
		if err := r.other.Unbind(r.index, p); err != nil && !errors.Is(err, ErrAddrNotFound) {
			res.fail(p.Addr(), err)
		}
	}
	r.converted = listed && len(res.Errors) == failed
}

// list lists the VIPs bound through the link, again when the kernel says the listing was
// interrupted.
func (r *Reconciler) list(vips VIPs) ([]Address, error) {
	var err error
	for range listAttempts {
		var addrs []Address
		addrs, err = vips.List(r.index)
		if err == nil {
			return addrs, nil
		}
		if !errors.Is(err, ErrDumpInterrupted) {
			break
		}
	}
	return nil, err
}

// add binds one VIP.
func (r *Reconciler) add(a netip.Addr, res *Result) {
	res.Writes++
	res.Added++
	r.writes.Add(1)
	err := r.vips.Bind(r.index, a)
	if err != nil && !errors.Is(err, ErrAddrExists) {
		res.fail(a, err)
		r.stale = true // the link may have gone
		return
	}
	r.bound[a] = true
}

// del unbinds one VIP (bound as any prefix length).
func (r *Reconciler) del(p netip.Prefix, res *Result) {
	res.Writes++
	res.Removed++
	r.writes.Add(1)
	err := r.vips.Unbind(r.index, p)
	if err != nil && !errors.Is(err, ErrAddrNotFound) {
		res.fail(p.Addr(), err)
		r.stale = true
		return
	}
	if p.Bits() == p.Addr().BitLen() {
		delete(r.bound, p.Addr())
	}
}

func (res *Result) fail(a netip.Addr, err error) {
	if res.Errors == nil {
		res.Errors = map[netip.Addr]error{}
	}
	res.Errors[a] = errors.Join(res.Errors[a], err)
}

// check rejects addresses that cannot be a VIP as given.
func check(a netip.Addr) error {
	if !a.IsValid() || a.Is4In6() || a.Zone() != "" || a.IsUnspecified() {
		return fmt.Errorf("%v is not a plain IPv4 or IPv6 address", a)
	}
	return nil
}

func host(a netip.Addr) netip.Prefix { return netip.PrefixFrom(a, a.BitLen()) }

func sortAddrs(s []netip.Addr) {
	sort.Slice(s, func(i, j int) bool { return s[i].Less(s[j]) })
}

func sortPrefixes(s []netip.Prefix) {
	sort.Slice(s, func(i, j int) bool {
		if c := s[i].Addr().Compare(s[j].Addr()); c != 0 {
			return c < 0
		}
		return s[i].Bits() < s[j].Bits()
	})
}

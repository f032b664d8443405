package dummyif

import (
	"fmt"
	"net/netip"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/kube-ipvs/kube-ipvs/internal/oplog"
)

// FakeNetlink is an in-memory Netlink for tests. It answers as the kernel does (duplicate
// and missing addresses, an IPv6 address present under another prefix length), logs every
// call as one line (TakeOps returns them), and can be told to fail.
type FakeNetlink struct {
	oplog.Log
	mu        sync.Mutex
	links     map[string]*fakeLink
	nextIndex int

	// Fail, when set, is consulted before every call with the op name (the first word of the
	// logged line: link, add-dummy, addr-list, addr-add, addr-del, link-del) and its argument
	// (the link name, or the prefix for addr-add and addr-del, or "" for addr-list and
	// link-del). A non-nil error is returned instead of doing the call; the call is still
	// logged. Fail must not call the fake.
	Fail func(op, arg string) error
}

type fakeLink struct {
	Link
	addrs  map[netip.Prefix]int // prefix -> IFA_F_* flags
	routes map[netip.Prefix]int // the proxy's local routes (always 0)
}

// NewFakeNetlink returns a fake with no links.
func NewFakeNetlink() *FakeNetlink {
	return &FakeNetlink{links: map[string]*fakeLink{}, nextIndex: 1}
}

// PutLink creates a link directly, without logging a call, and returns its index.
func (f *FakeNetlink) PutLink(name, typ string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.putLink(name, typ)
}

func (f *FakeNetlink) putLink(name, typ string) int {
	f.nextIndex++
	f.links[name] = &fakeLink{Link: Link{Index: f.nextIndex, Type: typ}, addrs: map[netip.Prefix]int{}, routes: map[netip.Prefix]int{}}
	return f.nextIndex
}

// DeleteLink removes a link directly, without logging a call.
func (f *FakeNetlink) DeleteLink(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.links, name)
}

// PutAddr adds an address to a link directly, without logging a call.
func (f *FakeNetlink) PutAddr(name string, p netip.Prefix, flags int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.links[name].addrs[p] = flags
}

// DropAddr removes an address from a link directly, without logging a call (drift made
// behind the reconciler's back).
func (f *FakeNetlink) DropAddr(name string, p netip.Prefix) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.links[name].addrs, p)
}

// Addrs lists a link's addresses, sorted, as "prefix" or "prefix flags=0x.." when flags are
// set; nil when the link does not exist.
func (f *FakeNetlink) Addrs(name string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	l, ok := f.links[name]
	if !ok {
		return nil
	}
	return prefixLines(l.addrs)
}

// LinkType returns the type of a link, "" when it does not exist.
func (f *FakeNetlink) LinkType(name string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if l, ok := f.links[name]; ok {
		return l.Type
	}
	return ""
}

func (f *FakeNetlink) call(op, arg, line string) error {
	f.Record(op + " " + line)
	if f.Fail != nil {
		return f.Fail(op, arg)
	}
	return nil
}

func (f *FakeNetlink) byIndex(i int) *fakeLink {
	for _, l := range f.links {
		if l.Index == i {
			return l
		}
	}
	return nil
}

func (f *FakeNetlink) LinkByName(name string) (Link, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("link", name, name); err != nil {
		return Link{}, err
	}
	l, ok := f.links[name]
	if !ok {
		return Link{}, fmt.Errorf("link %s: %w", name, ErrLinkNotFound)
	}
	return l.Link, nil
}

func (f *FakeNetlink) AddDummy(name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("add-dummy", name, name); err != nil {
		return err
	}
	if _, ok := f.links[name]; ok {
		return fmt.Errorf("create %s: %w", name, unix.EEXIST)
	}
	f.putLink(name, "dummy")
	return nil
}

func (f *FakeNetlink) AddrList(linkIndex int) ([]Address, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("addr-list", "", fmt.Sprint(linkIndex)); err != nil {
		return nil, err
	}
	l := f.byIndex(linkIndex)
	if l == nil {
		return nil, fmt.Errorf("list addresses of link %d: %w", linkIndex, unix.ENODEV)
	}
	out := make([]Address, 0, len(l.addrs))
	for p, fl := range l.addrs {
		out = append(out, Address{Prefix: p, Flags: fl})
	}
	return out, nil
}

func (f *FakeNetlink) AddrAdd(linkIndex int, p netip.Prefix, flags int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("addr-add", p.String(), fmt.Sprintf("%d %s flags=%#x", linkIndex, p, flags)); err != nil {
		return err
	}
	l := f.byIndex(linkIndex)
	if l == nil {
		return fmt.Errorf("add %s to link %d: %w", p, linkIndex, unix.ENODEV)
	}
	for have := range l.addrs {
		// IPv4 may hold one address under several prefix lengths; IPv6 may not.
		if have == p || (p.Addr().Is6() && have.Addr() == p.Addr()) {
			return fmt.Errorf("add %s to link %d: %w", p, linkIndex, ErrAddrExists)
		}
	}
	l.addrs[p] = flags
	return nil
}

func (f *FakeNetlink) AddrDel(linkIndex int, p netip.Prefix) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("addr-del", p.String(), fmt.Sprintf("%d %s", linkIndex, p)); err != nil {
		return err
	}
	l := f.byIndex(linkIndex)
	if l == nil {
		return fmt.Errorf("remove %s from link %d: %w", p, linkIndex, unix.ENODEV)
	}
	if _, ok := l.addrs[p]; !ok {
		return fmt.Errorf("remove %s from link %d: %w", p, linkIndex, ErrAddrNotFound)
	}
	delete(l.addrs, p)
	if p.Addr().Is4() {
		l.lastIPv4Gone()
	}
	return nil
}

func (f *FakeNetlink) LinkDel(linkIndex int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("link-del", "", fmt.Sprint(linkIndex)); err != nil {
		return err
	}
	for name, l := range f.links {
		if l.Index == linkIndex {
			delete(f.links, name)
			return nil
		}
	}
	return fmt.Errorf("delete link %d: %w", linkIndex, ErrLinkNotFound)
}

// prefixLines lists prefixes, sorted, as "prefix" or "prefix flags=0x.." when flags are set.
func prefixLines(m map[netip.Prefix]int) []string {
	ps := make([]netip.Prefix, 0, len(m))
	for p := range m {
		ps = append(ps, p)
	}
	sortPrefixes(ps)
	out := []string{}
	for _, p := range ps {
		if fl := m[p]; fl != 0 {
			out = append(out, fmt.Sprintf("%s flags=%#x", p, fl))
		} else {
			out = append(out, p.String())
		}
	}
	return out
}

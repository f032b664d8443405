package dummyif

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Link is what the reconciler needs to know about a link.
type Link struct {
	Index int
	Type  string // "dummy", "veth", ... as netlink names it
	Up    bool   // administratively up (IFF_UP)
}

// Address is one address of a link, as the kernel lists it.
type Address struct {
	Prefix netip.Prefix
	Flags  int // IFA_F_* flags
}

// Netlink is the small kernel surface the reconciler uses: one method, one request.
type Netlink interface {
	// LinkByName finds a link; an error wrapping ErrLinkNotFound when there is none.
	LinkByName(name string) (Link, error)
	// AddDummy creates a dummy link; it starts down.
	AddDummy(name string) error
	// AddrList lists the addresses of one link. It fails, with an error wrapping
	// ErrDumpInterrupted, rather than return a listing the kernel marked inconsistent.
	AddrList(linkIndex int) ([]Address, error)
	// AddrAdd adds an address with the given IFA_F_* flags; an error wrapping
	// ErrAddrExists when the link already has it.
	AddrAdd(linkIndex int, p netip.Prefix, flags int) error
	// AddrDel removes an address; an error wrapping ErrAddrNotFound when the link lacks it.
	AddrDel(linkIndex int, p netip.Prefix) error
	// LinkDel deletes a link (with its addresses); an error wrapping ErrLinkNotFound when
	// there is none. Only `kube-ipvs cleanup` calls it.
	LinkDel(linkIndex int) error
	Routes
}

var (
	// ErrLinkNotFound is wrapped by LinkByName when no link has the name.
	ErrLinkNotFound = errors.New("link not found")
	// ErrAddrExists is wrapped by AddrAdd when the address is already on the link.
	ErrAddrExists = errors.New("address already on the link")
	// ErrAddrNotFound is wrapped by AddrDel when the address is not on the link.
	ErrAddrNotFound = errors.New("address not on the link")
	// ErrDumpInterrupted is wrapped by AddrList when the kernel's listing may be incomplete.
	ErrDumpInterrupted = errors.New("address listing interrupted; result not trusted")
)

// kernelNetlink is Netlink over vishvananda/netlink in the network namespace it was created
// in, over one socket for all its requests. (The library's package-level functions open,
// bind and close a socket for every request: binding 50,000 Service addresses that way
// costs 50,000 sockets, several times the address writes themselves under emulation.)
type kernelNetlink struct {
	h *netlink.Handle
}

// NewNetlink returns the kernel's Netlink in the current network namespace, for callers
// that use the link directly (`kube-ipvs cleanup`).
func NewNetlink() Netlink { return newKernelNetlink() }

// newKernelNetlink opens the socket in the current network namespace; if that fails, every
// request opens its own, as the package-level functions do.
func newKernelNetlink() kernelNetlink {
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return kernelNetlink{h: &netlink.Handle{}}
	}
	return kernelNetlink{h: h}
}

func (k kernelNetlink) LinkByName(name string) (Link, error) {
	l, err := k.h.LinkByName(name)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return Link{}, fmt.Errorf("link %s: %w", name, ErrLinkNotFound)
		}
		return Link{}, fmt.Errorf("link %s: %w", name, err)
	}
	return Link{Index: l.Attrs().Index, Type: l.Type(), Up: l.Attrs().Flags&net.FlagUp != 0}, nil
}

func (k kernelNetlink) AddDummy(name string) error {
	if err := k.h.LinkAdd(&netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Name: name}}); err != nil {
		return fmt.Errorf("create dummy link %s: %w", name, err)
	}
	return nil
}

func (k kernelNetlink) AddrList(linkIndex int) ([]Address, error) {
	// A link with only an index: the library filters the dump by it.
	link := &netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Index: linkIndex}}
	addrs, err := k.h.AddrList(link, netlink.FAMILY_ALL)
	if errors.Is(err, netlink.ErrDumpInterrupted) {
		return nil, fmt.Errorf("list addresses of link %d: %w", linkIndex, ErrDumpInterrupted)
	}
	if err != nil {
		return nil, fmt.Errorf("list addresses of link %d: %w", linkIndex, err)
	}
	out := make([]Address, 0, len(addrs))
	for _, a := range addrs {
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok {
			continue
		}
		bits, _ := a.Mask.Size()
		out = append(out, Address{Prefix: netip.PrefixFrom(ip.Unmap(), bits), Flags: a.Flags})
	}
	return out, nil
}

func (k kernelNetlink) AddrAdd(linkIndex int, p netip.Prefix, flags int) error {
	err := k.h.AddrAdd(&netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Index: linkIndex}}, nlAddr(p, flags))
	if errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("add %s to link %d: %w", p, linkIndex, ErrAddrExists)
	}
	if err != nil {
		return fmt.Errorf("add %s to link %d: %w", p, linkIndex, err)
	}
	return nil
}

func (k kernelNetlink) AddrDel(linkIndex int, p netip.Prefix) error {
	err := k.h.AddrDel(&netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Index: linkIndex}}, nlAddr(p, 0))
	if errors.Is(err, unix.EADDRNOTAVAIL) {
		return fmt.Errorf("remove %s from link %d: %w", p, linkIndex, ErrAddrNotFound)
	}
	if err != nil {
		return fmt.Errorf("remove %s from link %d: %w", p, linkIndex, err)
	}
	return nil
}

func (k kernelNetlink) LinkDel(linkIndex int) error {
	err := k.h.LinkDel(&netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Index: linkIndex}})
	if errors.Is(err, unix.ENODEV) {
		return fmt.Errorf("delete link %d: %w", linkIndex, ErrLinkNotFound)
	}
	if err != nil {
		return fmt.Errorf("delete link %d: %w", linkIndex, err)
	}
	return nil
}

func nlAddr(p netip.Prefix, flags int) *netlink.Addr {
	return &netlink.Addr{
		IPNet: &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())},
		Flags: flags,
	}
}

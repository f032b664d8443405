package dummyif

import (
	"fmt"
	"net/netip"

	"golang.org/x/sys/unix"
)

// Binding names how the reconciler makes a VIP local through the link (--vip-binding).
type Binding string

const (
	// BindAddress binds each VIP as a /32 or /128 address of the link, as kube-proxy's IPVS
	// mode does: `ip addr show kube-ipvs0` lists them. The kernel walks the link's address
	// list on every add, so binding N of them costs O(N^2).
	BindAddress Binding = "address"
	// BindRoute makes each VIP local with a `local` route through the link in the local
	// table (`ip route show table local dev kube-ipvs0`), which costs O(log N) per VIP. The
	// link is set up: IPv6 refuses a route through a down link and removes those through a
	// link that goes down.
	BindRoute Binding = "route"
)

// Bindings lists the values of --vip-binding.
func Bindings() []Binding { return []Binding{BindAddress, BindRoute} }

// ParseBinding reads a --vip-binding value.
func ParseBinding(s string) (Binding, error) {
	for _, b := range Bindings() {
		if string(b) == s {
			return b, nil
		}
	}
	return "", fmt.Errorf("use %s or %s", BindAddress, BindRoute)
}

// VIPs binds, unbinds and lists the VIPs made local through one link, in one of the two
// ways of Binding. Listing returns only what this way binds and the proxy owns: every
// address of the link, or only the link's local routes in the local table that carry
// RouteProtocol. Each entry is the prefix found (a VIP is bound right as a /32 or /128),
// with IFA_F_* flags for addresses.
type VIPs interface {
	Binding() Binding
	// NeedsUp says whether the link must be up for the VIPs to stay bound.
	NeedsUp() bool
	List(linkIndex int) ([]Address, error)
	// Bind wraps ErrAddrExists when the VIP is already bound.
	Bind(linkIndex int, a netip.Addr) error
	// Unbind wraps ErrAddrNotFound when the prefix is not bound.
	Unbind(linkIndex int, p netip.Prefix) error
}

// VIPsFor returns the VIPs of that binding over nl.
func VIPsFor(b Binding, nl Netlink) VIPs {
	if b == BindRoute {
		return routeVIPs{nl}
	}
	return addressVIPs{nl}
}

// addressVIPs binds VIPs as addresses of the link.
type addressVIPs struct{ nl Netlink }

func (addressVIPs) Binding() Binding { return BindAddress }
func (addressVIPs) NeedsUp() bool    { return false }

func (v addressVIPs) List(linkIndex int) ([]Address, error) { return v.nl.AddrList(linkIndex) }

// Bind adds the VIP as a host address, IPv6 ones without duplicate address detection (see
// the package comment).
func (v addressVIPs) Bind(linkIndex int, a netip.Addr) error {
	flags := 0
	if a.Is6() {
		flags = unix.IFA_F_NODAD
	}
	return v.nl.AddrAdd(linkIndex, host(a), flags)
}

func (v addressVIPs) Unbind(linkIndex int, p netip.Prefix) error {
	return v.nl.AddrDel(linkIndex, p)
}

// routeVIPs binds VIPs as local routes through the link in the local table.
type routeVIPs struct{ nl Netlink }

func (routeVIPs) Binding() Binding { return BindRoute }
func (routeVIPs) NeedsUp() bool    { return true }

func (v routeVIPs) List(linkIndex int) ([]Address, error) {
	routes, err := v.nl.LocalRouteList(linkIndex)
	if err != nil {
		return nil, err
	}
	out := make([]Address, len(routes))
	for i, p := range routes {
		out[i] = Address{Prefix: p}
	}
	return out, nil
}

func (v routeVIPs) Bind(linkIndex int, a netip.Addr) error {
	return v.nl.LocalRouteAdd(linkIndex, host(a))
}

func (v routeVIPs) Unbind(linkIndex int, p netip.Prefix) error {
	return v.nl.LocalRouteDel(linkIndex, p)
}

package firewall

import (
	"net/netip"
	"slices"
)

// ServiceCIDREntries returns what SetServiceCIDRs holds for the Service CIDRs: one entry per
// masked prefix, in the set of its family, for the families cfg enables. They come from the
// configuration and the API, not from any Service, so the Tracker never holds them; a /0
// cannot be stored and is left out (the API refuses one anyway).
func ServiceCIDREntries(cidrs []netip.Prefix, cfg Config) EntryMap {
	out := EntryMap{}
	for _, f := range cfg.Families() {
		out[Name(SetServiceCIDRs, f)] = map[Entry]bool{}
	}
	for _, p := range cidrs {
		if !p.IsValid() || p.Bits() == 0 || p.Addr().Is4In6() {
			continue
		}
		m := out[Name(SetServiceCIDRs, FamilyOf(p.Addr()))]
		if m != nil {
			m[Entry{Net: p.Masked()}] = true
		}
	}
	return out
}

// WithServiceCIDRs is the whole desired content of the sets: the Services' entries from
// services, and the Service CIDR sets' from cidrs (ServiceCIDREntries).
func WithServiceCIDRs(services DesiredSets, cidrs EntryMap) DesiredSets {
	return withCIDRs{services, cidrs}
}

type withCIDRs struct {
	services DesiredSets
	cidrs    EntryMap
}

func (w withCIDRs) pick(n SetName) DesiredSets {
	if _, ok := w.cidrs[n]; ok {
		return w.cidrs
	}
	return w.services
}

// Names lists the Services' sets and the Service CIDR sets.
func (w withCIDRs) Names() []SetName {
	out := w.services.Names()
	for n := range w.cidrs {
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}

func (w withCIDRs) Count(n SetName) int                   { return w.pick(n).Count(n) }
func (w withCIDRs) Has(n SetName, p Packed) bool          { return w.pick(n).Has(n, p) }
func (w withCIDRs) Range(n SetName, fn func(Packed) bool) { w.pick(n).Range(n, fn) }

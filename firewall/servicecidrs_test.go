package firewall

import (
	"net/netip"
	"testing"
)

func TestServiceCIDREntries(t *testing.T) {
	pp := netip.MustParsePrefix
	cidrs := []netip.Prefix{pp("10.96.0.0/12"), pp("10.200.0.0/24"), pp("fd00:96::/108"), pp("0.0.0.0/0"), {}}
	m := ServiceCIDREntries(cidrs, Config{})
	v4, v6 := Name(SetServiceCIDRs, IPv4), Name(SetServiceCIDRs, IPv6)
	if m.Count(v4) != 2 || !m[v4][Entry{Net: pp("10.96.0.0/12")}] || !m[v4][Entry{Net: pp("10.200.0.0/24")}] {
		t.Errorf("IPv4 set: %v", m[v4])
	}
	if m.Count(v6) != 1 || !m[v6][Entry{Net: pp("fd00:96::/108")}] {
		t.Errorf("IPv6 set: %v", m[v6])
	}
	defs := map[SetName]SetDef{}
	for _, d := range Sets(Config{}) {
		defs[d.Name] = d
	}
	for n, es := range m {
		for e := range es {
			if err := defs[n].Check(e); err != nil {
				t.Error(err)
			}
		}
	}
	// A family that is not enabled has no set, so no entries; an empty list still names
	// the enabled family's set, so that a repair empties it.
	only4 := ServiceCIDREntries(cidrs, Config{IPv4: true})
	if _, ok := only4[v6]; ok || only4.Count(v4) != 2 {
		t.Errorf("IPv4 only: %v", only4)
	}
	if none, ok := ServiceCIDREntries(nil, Config{IPv4: true})[v4]; !ok || len(none) != 0 {
		t.Errorf("no CIDRs: %v, %v", none, ok)
	}
}

// The Service CIDR sets are read from the CIDRs, every other set from the Services.
func TestWithServiceCIDRs(t *testing.T) {
	vip := Entry{IP: netip.MustParseAddr("10.96.0.10")}
	services := EntryMap{SetVIPs: {vip: true}, Name(SetServiceCIDRs, IPv4): {{Net: netip.MustParsePrefix("10.0.0.0/8")}: true}}
	cidr := Entry{Net: netip.MustParsePrefix("10.96.0.0/12")}
	d := WithServiceCIDRs(services, ServiceCIDREntries([]netip.Prefix{cidr.Net}, Config{}))
	if d.Count(SetVIPs) != 1 || !d.Has(SetVIPs, vip.Pack()) {
		t.Error("Service entries not read from the Services")
	}
	var got []Entry
	d.Range(Name(SetServiceCIDRs, IPv4), func(p Packed) bool { got = append(got, p.Entry()); return true })
	if len(got) != 1 || got[0] != cidr || d.Count(Name(SetServiceCIDRs, IPv4)) != 1 {
		t.Errorf("Service CIDR set holds %v, want only %v", got, cidr)
	}
	if d.Count(Name(SetServiceCIDRs, IPv6)) != 0 {
		t.Error("empty IPv6 CIDR set not empty")
	}
}

package proxy

import (
	"net/netip"
	"slices"
	"testing"
)

func addrs(ss ...string) []netip.Addr {
	out := make([]netip.Addr, 0, len(ss))
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

func prefixes(ss ...string) []netip.Prefix {
	out := make([]netip.Prefix, 0, len(ss))
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

func TestNodePortAddresses(t *testing.T) {
	host := addrs("192.168.1.10", "127.0.0.1", "169.254.3.4", "10.96.0.1", "::1", "fe80::1", "2001:db8::10",
		"::ffff:192.168.1.11", "192.168.1.10", "fd00::5")
	cases := []struct {
		name  string
		cidrs []netip.Prefix
		host  []netip.Addr
		want  []string
	}{{
		name: "no cidrs: all but loopback and link-local; sorted, deduped, unmapped",
		host: host,
		want: []string{"10.96.0.1", "192.168.1.10", "192.168.1.11", "2001:db8::10", "fd00::5"},
	}, {
		name:  "cidrs: only addresses inside them",
		cidrs: prefixes("192.168.1.0/24", "2001:db8::/64"), host: host,
		want: []string{"192.168.1.10", "192.168.1.11", "2001:db8::10"},
	}, {
		name:  "cidrs may select loopback explicitly",
		cidrs: prefixes("127.0.0.0/8"), host: host,
		want: []string{"127.0.0.1"},
	}, {
		name:  "4in6 cidr matches unmapped IPv4",
		cidrs: prefixes("::ffff:192.168.1.0/120"), host: host,
		want: []string{"192.168.1.10", "192.168.1.11"},
	}, {
		name:  "unmasked cidr still matches",
		cidrs: prefixes("192.168.1.99/24"), host: addrs("192.168.1.10"),
		want: []string{"192.168.1.10"},
	}, {
		name:  "cidrs match nothing",
		cidrs: prefixes("172.16.0.0/12"), host: host,
		want: nil,
	}, {
		name: "zones stripped, unspecified and invalid skipped",
		host: []netip.Addr{netip.MustParseAddr("2001:db8::1%eth0"), netip.MustParseAddr("0.0.0.0"), {}},
		want: []string{"2001:db8::1"},
	}, {
		name: "no host addresses",
		want: nil,
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := NodePortAddresses(tc.cidrs, tc.host)
			var gs []string
			for _, a := range got {
				gs = append(gs, a.String())
			}
			if !slices.Equal(gs, tc.want) {
				t.Errorf("got %v, want %v", gs, tc.want)
			}
		})
	}
}

package firewall

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/kube-ipvs/kube-ipvs/model"
)

func TestSetNames(t *testing.T) {
	seen := map[SetName]bool{}
	defs := Sets(Config{})
	if len(defs) != 29 {
		t.Errorf("%d sets, want 14 per family and the health-check set", len(defs))
	}
	for _, d := range defs {
		for _, n := range []SetName{d.Name, TempName(d.Name)} {
			if !strings.HasPrefix(string(n), Prefix) {
				t.Errorf("%s lacks the prefix %s", n, Prefix)
			}
			if len(n) > MaxSetNameLen {
				t.Errorf("%s is %d bytes; the kernel takes %d", n, len(n), MaxSetNameLen)
			}
			if strings.HasPrefix(string(n), "KUBE-") {
				t.Errorf("%s uses kube-proxy's prefix", n)
			}
			if seen[n] {
				t.Errorf("%s defined twice (or a temporary name collides)", n)
			}
			seen[n] = true
		}
		if (d.Type == BitmapPort) != (d.Family == AnyFamily) {
			t.Errorf("%s: type %s with family %s", d.Name, d.Type, d.Family)
		}
		if d.Family == IPv6 && !strings.HasSuffix(string(d.Name), "-6") {
			t.Errorf("IPv6 set %s lacks the -6 suffix", d.Name)
		}
	}
	if n := len(Sets(Config{IPv6: true})); n != 15 {
		t.Errorf("IPv6 only: %d sets, want 15", n)
	}
}

func TestEntryCheckAndString(t *testing.T) {
	ip := netip.MustParseAddr
	v4 := SetDef{Name: "KIPVS-X", Family: IPv4}
	v6 := SetDef{Name: "KIPVS-X-6", Family: IPv6}
	withType := func(d SetDef, t SetType) SetDef { d.Type = t; return d }
	bitmap := SetDef{Name: "KIPVS-P", Type: BitmapPort, PortFrom: 0, PortTo: 65535}
	cases := []struct {
		def  SetDef
		e    Entry
		str  string
		fits bool
	}{
		{withType(v4, HashIP), Entry{IP: ip("10.0.0.1")}, "10.0.0.1", true},
		{withType(v4, HashIP), Entry{IP: ip("fd00::1")}, "fd00::1", false},
		{withType(v4, HashIP), Entry{IP: ip("::ffff:10.0.0.1")}, "::ffff:10.0.0.1", false},
		{withType(v4, HashIP), Entry{IP: ip("10.0.0.1"), Port: 80, Proto: model.TCP}, "10.0.0.1,tcp:80", false},
		{withType(v4, HashIPPort), Entry{IP: ip("10.0.0.1"), Proto: model.UDP, Port: 53}, "10.0.0.1,udp:53", true},
		{withType(v4, HashIPPort), Entry{IP: ip("10.0.0.1"), Port: 53}, "10.0.0.1", false},
		{withType(v6, HashIPPort), Entry{IP: ip("fd00::1"), Proto: model.SCTP, Port: 9}, "fd00::1,sctp:9", true},
		{withType(v4, HashIPPortIP), Entry{IP: ip("10.0.0.1"), Proto: model.TCP, Port: 80, IP2: ip("10.1.0.1")}, "10.0.0.1,tcp:80,10.1.0.1", true},
		{withType(v4, HashIPPortIP), Entry{IP: ip("10.0.0.1"), Proto: model.TCP, Port: 80, IP2: ip("fd00::1")}, "10.0.0.1,tcp:80,fd00::1", false},
		{withType(v6, HashIPPortNet), Entry{IP: ip("fd00::1"), Proto: model.TCP, Port: 80, Net: netip.MustParsePrefix("2001:db8::/32")}, "fd00::1,tcp:80,2001:db8::/32", true},
		{withType(v4, HashIPPortNet), Entry{IP: ip("10.0.0.1"), Proto: model.TCP, Port: 80, Net: netip.MustParsePrefix("10.1.2.3/16")}, "10.0.0.1,tcp:80,10.1.2.3/16", false},
		{withType(v4, HashIPPortNet), Entry{IP: ip("10.0.0.1"), Proto: model.TCP, Port: 80, Net: netip.MustParsePrefix("0.0.0.0/0")}, "10.0.0.1,tcp:80,0.0.0.0/0", false},
		{withType(v4, HashNet), Entry{Net: netip.MustParsePrefix("10.96.0.0/12")}, "10.96.0.0/12", true},
		{withType(v6, HashNet), Entry{Net: netip.MustParsePrefix("fd00:96::/108")}, "fd00:96::/108", true},
		{withType(v4, HashNet), Entry{Net: netip.MustParsePrefix("fd00:96::/108")}, "fd00:96::/108", false},
		{withType(v4, HashNet), Entry{Net: netip.MustParsePrefix("10.96.0.1/12")}, "10.96.0.1/12", false},
		{withType(v4, HashNet), Entry{IP: ip("10.0.0.1"), Net: netip.MustParsePrefix("10.96.0.0/12")}, "10.0.0.1,10.96.0.0/12", false},
		{bitmap, Entry{Port: 32000}, "32000", true},
		{bitmap, Entry{Port: 32000, Proto: model.TCP}, "32000", false},
	}
	for _, tc := range cases {
		if got := tc.e.String(); got != tc.str {
			t.Errorf("String = %q, want %q", got, tc.str)
		}
		if err := tc.def.Check(tc.e); (err == nil) != tc.fits {
			t.Errorf("%s in %s: Check = %v, want fits=%v", tc.e, tc.def.Type, err, tc.fits)
		}
	}
}

// A repair checks every entry of every set: a valid entry costs no allocation.
func TestCheckOfAValidEntryAllocatesNothing(t *testing.T) {
	d := SetDef{Name: SetLoopBack, Type: HashIPPortIP, Family: IPv4}
	e := Entry{IP: netip.MustParseAddr("10.0.0.1"), Proto: model.TCP, Port: 80, IP2: netip.MustParseAddr("10.0.0.1")}
	if n := testing.AllocsPerRun(100, func() {
		if err := d.Check(e); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("Check allocates %v times per valid entry", n)
	}
}

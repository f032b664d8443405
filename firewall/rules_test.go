package firewall

import (
	"net/netip"
	"regexp"
	"strings"
	"testing"

	"github.com/kube-ipvs/kube-ipvs/test/golden"
)

var dualStackCIDRs = []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("fd00:10:244::/56")}

func TestRenderRulesGolden(t *testing.T) {
	cases := []struct {
		name string
		cfg  Config
	}{
		{"cluster-cidr", Config{ClusterCIDRs: dualStackCIDRs}},
		{"masquerade-all", Config{ClusterCIDRs: dualStackCIDRs, MasqueradeAll: true, MasqueradeMark: 0x1000}},
		{"no-cidr", Config{}},
		// detectLocalMode BridgeInterface and InterfaceNamePrefix: the interface replaces the
		// CIDRs in both families, which are not read.
		{"bridge-interface", Config{ClusterCIDRs: dualStackCIDRs, LocalInterface: "cbr0"}},
		{"interface-name-prefix", Config{LocalInterface: "veth+", MasqueradeMark: 0x8000}},
		{"two-cidrs-ipv4-only", Config{IPv4: true, ClusterCIDRs: []netip.Prefix{
			netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("10.245.0.0/16"), netip.MustParsePrefix("fd00::/64")}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v4, v6 := RenderRules(tc.cfg)
			golden.Check(t, tc.name+".v4.rules", v4)
			golden.Check(t, tc.name+".v6.rules", v6)
		})
	}
}

// Every rule and chain is ours, every set it names is defined, and a family's rules name
// only that family's sets (or the family-less one).
func TestRenderRulesUseOnlyOwnNamesAndDefinedSets(t *testing.T) {
	cfg := Config{ClusterCIDRs: dualStackCIDRs}
	defs := map[SetName]SetDef{}
	for _, d := range Sets(cfg) {
		defs[d.Name] = d
	}
	v4, v6 := RenderRules(cfg)
	setRef := regexp.MustCompile(`--ma(?:tch|p)-set (\S+) `)
	builtin := map[string]bool{"PREROUTING": true, "INPUT": true, "FORWARD": true, "OUTPUT": true, "POSTROUTING": true}
	for fam, text := range map[Family]string{IPv4: v4, IPv6: v6} {
		jumps := 0
		for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
			fields := strings.Fields(line)
			if !strings.HasPrefix(line, "#") && strings.Contains(line, "'") {
				// iptables-save escapes it, which makes saved rules differ from ours.
				t.Errorf("%s: apostrophe in a rule: %s", fam, line)
			}
			switch {
			case strings.HasPrefix(line, "#"), line == "COMMIT", strings.HasPrefix(line, "*"):
			case strings.HasPrefix(line, ":"):
				if !strings.HasPrefix(line, ":"+Prefix) {
					t.Errorf("%s: declares a chain that is not ours: %s", fam, line)
				}
			case fields[0] == "-A":
				if !strings.HasPrefix(fields[1], Prefix) {
					t.Errorf("%s: appends to a chain that is not ours: %s", fam, line)
				}
			case fields[0] == "-I":
				jumps++
				if !builtin[fields[1]] || fields[2] != "1" || !strings.HasPrefix(fields[len(fields)-1], Prefix) {
					t.Errorf("%s: an insert that is not a jump from a built-in chain to ours: %s", fam, line)
				}
			default:
				t.Errorf("%s: unexpected line %q", fam, line)
			}
			for _, m := range setRef.FindAllStringSubmatch(line, -1) {
				d, ok := defs[SetName(m[1])]
				if !ok {
					t.Errorf("%s: rule uses undefined set %s: %s", fam, m[1], line)
				} else if d.Family != fam && d.Family != AnyFamily {
					t.Errorf("%s: rule uses %s set %s", fam, d.Family, m[1])
				}
			}
		}
		if jumps != 10 {
			t.Errorf("%s: %d jump rules, want 10 (mangle PREROUTING/OUTPUT twice, nat PREROUTING/OUTPUT/POSTROUTING, filter INPUT/FORWARD/OUTPUT)", fam, jumps)
		}
	}
}

func TestRenderRulesFamilies(t *testing.T) {
	if v4, v6 := RenderRules(Config{IPv4: true}); v4 == "" || v6 != "" {
		t.Errorf("IPv4 only: v4 %d bytes, v6 %d bytes", len(v4), len(v6))
	}
	if v4, v6 := RenderRules(Config{IPv6: true}); v4 != "" || v6 == "" {
		t.Errorf("IPv6 only: v4 %d bytes, v6 %d bytes", len(v4), len(v6))
	}
	if v4, v6 := RenderRules(Config{}); v4 == "" || v6 == "" {
		t.Errorf("zero Config must be dual-stack")
	}
}

func TestConfigValidate(t *testing.T) {
	if err := (Config{MasqueradeMark: 0x3000}).Validate(); err == nil {
		t.Error("a two-bit mark is accepted")
	}
	if err := (Config{ClusterCIDRs: []netip.Prefix{{}}}).Validate(); err == nil {
		t.Error("an invalid CIDR is accepted")
	}
	if err := (Config{}).Validate(); err != nil {
		t.Errorf("zero Config: %v", err)
	}
	for _, bad := range []string{"a-very-long-interface", "ve+th+", "br 0"} {
		if err := (Config{LocalInterface: bad}).Validate(); err == nil {
			t.Errorf("local interface %q is accepted", bad)
		}
	}
	for _, good := range []string{"br0", "veth+", "cali+"} {
		if err := (Config{LocalInterface: good}).Validate(); err != nil {
			t.Errorf("local interface %q: %v", good, err)
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("RenderRules of an invalid Config does not panic")
		}
	}()
	RenderRules(Config{MasqueradeMark: 3})
}

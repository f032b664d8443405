package iptables

// Real-kernel tests, shared by the host (kernel_host_test.go, in a network namespace each
// test creates) and the guest (kernel_guest_test.go, Debian's kernel).

import (
	"strings"
	"testing"

	"github.com/kube-ipvs/kube-ipvs/firewall"
	"github.com/kube-ipvs/kube-ipvs/ipset"
	"github.com/kube-ipvs/kube-ipvs/test/netnstest"
)

// makeSets creates every set the rules of cfg reference, empty, through package ipset.
func makeSets(t *testing.T, cfg firewall.Config) *ipset.Reconciler {
	t.Helper()
	k, err := ipset.NewKernel()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Close)
	r := ipset.New(k)
	if res := r.Resync(firewall.Sets(cfg), nil); res.Err != nil || len(res.Errors) > 0 {
		t.Fatalf("ipset Resync: %v %v", res.Err, res.Errors)
	}
	return r
}

// firstRules maps "table/chain" to the first rule of each built-in chain that has rules.
func firstRules(save string) map[string]string {
	out := map[string]string{}
	for _, tb := range ParseSave([]byte(save)).Tables {
		for c, rules := range tb.Rules {
			if IsBuiltin(c) && len(rules) > 0 {
				out[tb.Name+"/"+c] = rules[0]
			}
		}
	}
	return out
}

// checkOurs checks a -save listing: every chain the input declares exists, and every
// built-in chain the input jumps from has our jumps first (before any other rule), each once.
func checkOurs(t *testing.T, family, input, save string) {
	t.Helper()
	s := ParseSave([]byte(save))
	tbl := ""
	ours := map[[2]string]int{} // table and built-in chain: how many jumps of ours
	for _, line := range strings.Split(input, "\n") {
		if f := Tokens(line); strings.HasPrefix(line, "*") {
			tbl = line[1:]
		} else if strings.HasPrefix(line, "-I ") {
			ours[[2]string{tbl, f[1]}]++
		}
	}
	for _, line := range strings.Split(input, "\n") {
		switch {
		case strings.HasPrefix(line, "*"):
			tbl = line[1:]
		case strings.HasPrefix(line, ":"):
			c := strings.Fields(line[1:])[0]
			if !s.Table(tbl).Has(c) {
				t.Errorf("%s: chain %s/%s missing from -save", family, tbl, c)
			}
		case strings.HasPrefix(line, "-I "):
			f := Tokens(line)
			rules := s.Table(tbl).Rules[f[1]]
			first := false
			for _, r := range rules[:min(ours[[2]string{tbl, f[1]}], len(rules))] {
				first = first || Target(Tokens(r)) == Target(f)
			}
			if !first {
				t.Errorf("%s: %s/%s does not start with the jumps of ours, among them to %s: %q", family, tbl, f[1], Target(f), rules)
			}
			n := 0
			for _, r := range rules {
				if Target(Tokens(r)) == Target(f) {
					n++
				}
			}
			if n != 1 {
				t.Errorf("%s: %s/%s jumps to %s %d times", family, tbl, f[1], Target(f), n)
			}
		}
	}
}

// The rendered rules restore on a backend; -save shows them with the jumps first; the same
// text costs nothing; Resync repairs a foreign rule inserted before ours and a flushed
// chain; Cleanup removes only ours and releases the sets.
func testBackendOnKernel(t *testing.T, b Backend) {
	netnstest.EnterNew(t)
	cfg := firewall.Config{ClusterCIDRs: nil}
	sets := makeSets(t, cfg)
	v4, v6 := firewall.RenderRules(cfg)
	run := New(OSExec{}, Config{Backend: b})
	res := run.Apply(v4, v6)
	if res.Err != nil || res.Restores != 2 {
		t.Fatalf("Apply on %s: %+v", b, res)
	}
	save4 := netnstest.Run(t, "iptables-"+string(b)+"-save")
	save6 := netnstest.Run(t, "ip6tables-"+string(b)+"-save")
	checkOurs(t, "iptables", v4, save4)
	checkOurs(t, "ip6tables", v6, save6)
	if res := run.Apply(v4, v6); res.Execs != 0 {
		t.Errorf("Apply of the same text ran %d processes", res.Execs)
	}
	if res := run.Resync(); res.Err != nil || res.Execs != 2 || res.Restores != 0 {
		t.Errorf("Resync with everything in place: %+v", res)
	}

	// Drift: a foreign rule before our jump, one of our chains flushed.
	netnstest.Run(t, "iptables-"+string(b), "-I", "INPUT", "1", "-s", "192.0.2.1", "-j", "DROP")
	netnstest.Run(t, "ip6tables-"+string(b), "-t", "nat", "-F", "KIPVS-SERVICES")
	if res := run.Resync(); res.Err != nil || res.Restores != 2 {
		t.Fatalf("Resync after drift: %+v", res)
	}
	save4 = netnstest.Run(t, "iptables-"+string(b)+"-save")
	checkOurs(t, "iptables", v4, save4)
	checkOurs(t, "ip6tables", v6, netnstest.Run(t, "ip6tables-"+string(b)+"-save"))
	if in := ParseSave([]byte(save4)).Table("filter").Rules["INPUT"]; len(in) != 2 || in[1] != "-s 192.0.2.1/32 -j DROP" {
		t.Errorf("INPUT after Resync: %q", in)
	}
	if res := run.Resync(); res.Restores != 0 {
		t.Errorf("a second Resync restored again: %+v", res)
	}

	// Cleanup leaves only the foreign rule, and the sets are free to go.
	if res := run.Cleanup(); res.Err != nil {
		t.Fatalf("Cleanup: %v", res.Err)
	}
	for _, tool := range []string{"iptables-legacy-save", "iptables-nft-save", "ip6tables-legacy-save", "ip6tables-nft-save"} {
		if out := netnstest.Run(t, tool); strings.Contains(out, "KIPVS-") {
			t.Errorf("%s after Cleanup:\n%s", tool, out)
		}
	}
	if !strings.Contains(netnstest.Run(t, "iptables-"+string(b)+"-save"), "-A INPUT -s 192.0.2.1/32 -j DROP") {
		t.Error("Cleanup removed a foreign rule")
	}
	if res := sets.Cleanup(); res.Err != nil || len(res.Errors) > 0 {
		t.Errorf("ipset Cleanup after iptables Cleanup: %v %v", res.Err, res.Errors)
	}
}

// Auto picks nft on a fresh node and legacy where legacy has the rules.
func testDetectOnKernel(t *testing.T) {
	netnstest.EnterNew(t)
	if b, err := New(OSExec{}, Config{}).Backend(); err != nil || b != NFT {
		t.Errorf("fresh namespace: %q, %v; want nft", b, err)
	}
	netnstest.Run(t, "iptables-legacy", "-A", "INPUT", "-s", "192.0.2.1", "-j", "ACCEPT")
	if b, err := New(OSExec{}, Config{}).Backend(); err != nil || b != Legacy {
		t.Errorf("with a legacy rule: %q, %v; want legacy", b, err)
	}
	netnstest.Run(t, "iptables-nft", "-A", "INPUT", "-s", "192.0.2.1", "-j", "ACCEPT")
	netnstest.Run(t, "ip6tables-nft", "-A", "INPUT", "-s", "2001:db8::1", "-j", "ACCEPT")
	if b, err := New(OSExec{}, Config{}).Backend(); err != nil || b != NFT {
		t.Errorf("with more nft rules: %q, %v; want nft", b, err)
	}
}

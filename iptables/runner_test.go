package iptables

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/kube-ipvs/kube-ipvs/firewall"
)

const rulesV1 = `*filter
:KIPVS-INPUT - [0:0]
-A KIPVS-INPUT -m set --match-set KIPVS-VIPS dst -m comment --comment "vip filter" -j REJECT
-I INPUT 1 -m comment --comment "kube-ipvs: input" -j KIPVS-INPUT
COMMIT
*nat
:KIPVS-SERVICES - [0:0]
:KIPVS-MARK-MASQ - [0:0]
-A KIPVS-MARK-MASQ -j MARK --or-mark 0x4000
-A KIPVS-SERVICES -m set --match-set KIPVS-CLUSTER-IP dst,dst -j KIPVS-MARK-MASQ
-I PREROUTING 1 -m comment --comment "kube-ipvs: services" -j KIPVS-SERVICES
-I OUTPUT 1 -m comment --comment "kube-ipvs: services" -j KIPVS-SERVICES
COMMIT
`

// rulesV2 changes a rule and drops the MARK-MASQ chain.
const rulesV2 = `*filter
:KIPVS-INPUT - [0:0]
-A KIPVS-INPUT -m set --match-set KIPVS-VIPS dst -m comment --comment "vip filter v2" -j REJECT
-I INPUT 1 -m comment --comment "kube-ipvs: input" -j KIPVS-INPUT
COMMIT
*nat
:KIPVS-SERVICES - [0:0]
-A KIPVS-SERVICES -m set --match-set KIPVS-CLUSTER-IP dst,dst -j MARK --or-mark 0x4000
-I PREROUTING 1 -m comment --comment "kube-ipvs: services" -j KIPVS-SERVICES
-I OUTPUT 1 -m comment --comment "kube-ipvs: services" -j KIPVS-SERVICES
COMMIT
`

const others = `*filter
:KUBE-FIREWALL - [0:0]
-A INPUT -j KUBE-FIREWALL
-A INPUT -p tcp --dport 22 -j ACCEPT
-A KUBE-FIREWALL -m mark --mark 0x8000/0x8000 -j DROP
COMMIT
`

func checkRes(t *testing.T, res Result, execs, restores int) {
	t.Helper()
	if res.Err != nil {
		t.Fatalf("error: %v", res.Err)
	}
	if res.Execs != execs || res.Restores != restores {
		t.Errorf("Execs %d, Restores %d; want %d, %d", res.Execs, res.Restores, execs, restores)
	}
}

// rulesOf returns the -A lines of a chain in a save.
func rulesOf(save, chain string) []string {
	var out []string
	for _, l := range strings.Split(save, "\n") {
		if strings.HasPrefix(l, "-A "+chain+" ") {
			out = append(out, strings.TrimPrefix(l, "-A "+chain+" "))
		}
	}
	return out
}

func commands(ops []string) []string {
	var out []string
	for _, o := range ops {
		if !strings.HasPrefix(o, "  ") {
			out = append(out, o)
		}
	}
	return out
}

func TestDetectBackend(t *testing.T) {
	cases := []struct {
		name  string
		setup func(f *FakeExec)
		cfg   Backend
		want  Backend
		err   bool
	}{
		{"fresh node: nft", func(f *FakeExec) {}, Auto, NFT, false},
		{"legacy has rules", func(f *FakeExec) { f.Load("iptables-legacy", others) }, Auto, Legacy, false},
		{"ip6tables legacy has rules", func(f *FakeExec) { f.Load("ip6tables-legacy", others) }, Auto, Legacy, false},
		{"nft has more", func(f *FakeExec) {
			f.Load("iptables-legacy", others)
			f.Load("iptables-nft", others)
			f.Load("ip6tables-nft", others)
		}, Auto, NFT, false},
		{"only legacy installed", func(f *FakeExec) { f.Uninstall("ip6tables-nft-restore") }, Auto, Legacy, false},
		{"explicit legacy on a fresh node", func(f *FakeExec) {}, Legacy, Legacy, false},
		{"explicit nft not installed", func(f *FakeExec) { f.Uninstall("iptables-nft-save") }, NFT, "", true},
		{"nothing installed", func(f *FakeExec) { f.Uninstall("iptables-nft-save", "iptables-legacy-save") }, Auto, "", true},
		{"bogus backend", func(f *FakeExec) {}, "bpf", "", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := NewFakeExec()
			tc.setup(f)
			r := New(f, Config{Backend: tc.cfg})
			b, err := r.Backend()
			if (err != nil) != tc.err || b != tc.want {
				t.Errorf("Backend() = %q, %v; want %q, error %v", b, err, tc.want, tc.err)
			}
		})
	}
}

func TestApplyOnlyWhenTextChanges(t *testing.T) {
	f := NewFakeExec()
	f.Load("iptables-nft", others)
	r := New(f, Config{Backend: NFT})

	checkRes(t, r.Apply(rulesV1, ""), 4, 1) // and one ip6tables-save: nothing of ours to clear
	if got := commands(f.TakeOps()); !slices.Equal(got, []string{
		"iptables-nft-save", "iptables-nft-restore -w 5 --noflush", "iptables-nft-save", "ip6tables-nft-save"}) {
		t.Errorf("runs: %v", got)
	}
	s := f.Save("iptables-nft")
	if got := rulesOf(s, "INPUT"); !slices.Equal(got, []string{
		`-m comment --comment "kube-ipvs: input" -j KIPVS-INPUT`, "-j KUBE-FIREWALL", "-p tcp --dport 22 -j ACCEPT"}) {
		t.Errorf("INPUT: %q", got)
	}
	if got := rulesOf(s, "KIPVS-INPUT"); len(got) != 1 || !strings.HasSuffix(got[0], "--reject-with icmp-port-unreachable") {
		t.Errorf("KIPVS-INPUT: %q", got)
	}

	// Same text: nothing runs, not even -save.
	checkRes(t, r.Apply(rulesV1, ""), 0, 0)
	// Resync with everything in place only reads.
	checkRes(t, r.Resync(), 1, 0)
	f.TakeOps()

	// New text: the jumps already in place are not inserted again; the dropped chain goes.
	checkRes(t, r.Apply(rulesV2, ""), 3, 1)
	ops := f.TakeOps()
	input := strings.Join(ops, "\n")
	if strings.Contains(input, "-I INPUT") || strings.Contains(input, "-I PREROUTING") {
		t.Errorf("jumps in place were inserted again:\n%s", input)
	}
	if !strings.Contains(input, "  -F KIPVS-MARK-MASQ\n  -X KIPVS-MARK-MASQ") {
		t.Errorf("the chain no longer declared is not removed:\n%s", input)
	}
	s = f.Save("iptables-nft")
	if strings.Contains(s, "KIPVS-MARK-MASQ") {
		t.Errorf("KIPVS-MARK-MASQ left:\n%s", s)
	}
	for _, c := range []string{"PREROUTING", "OUTPUT", "INPUT"} {
		jumps := 0
		for _, r := range rulesOf(s, c) {
			if strings.Contains(r, "-j KIPVS-") {
				jumps++
			}
		}
		if jumps != 1 {
			t.Errorf("%s has %d jumps to our chains", c, jumps)
		}
	}
	if got := rulesOf(s, "KUBE-FIREWALL"); len(got) != 1 {
		t.Errorf("someone else's chain changed: %q", got)
	}
}

// Resync repairs our chains and puts our jumps first again; it leaves the rest alone.
func TestResyncRepairs(t *testing.T) {
	f := NewFakeExec()
	r := New(f, Config{Backend: Legacy})
	checkRes(t, r.Apply(rulesV1, rulesV1), 6, 2)

	// Someone inserts a rule before ours, and flushes one of our chains in ip6tables.
	if err := f.Load("iptables-legacy", "*filter\n-I INPUT 1 -s 192.0.2.1 -j DROP\nCOMMIT\n"); err != nil {
		t.Fatal(err)
	}
	if err := f.Load("ip6tables-legacy", "*nat\n-F KIPVS-SERVICES\nCOMMIT\n"); err != nil {
		t.Fatal(err)
	}
	f.TakeOps()
	checkRes(t, r.Resync(), 8, 2)
	s := f.Save("iptables-legacy")
	if got := rulesOf(s, "INPUT"); !slices.Equal(got, []string{`-m comment --comment "kube-ipvs: input" -j KIPVS-INPUT`, "-s 192.0.2.1 -j DROP"}) {
		t.Errorf("INPUT after Resync: %q", got)
	}
	if got := rulesOf(f.Save("ip6tables-legacy"), "KIPVS-SERVICES"); len(got) != 1 {
		t.Errorf("KIPVS-SERVICES after Resync: %q", got)
	}
	// Now right: Resync reads only.
	checkRes(t, r.Resync(), 2, 0)

	// Duplicated jumps (an old version, a manual -A) are collapsed to one, first.
	f.Load("iptables-legacy", "*nat\n-A PREROUTING -m comment --comment \"kube-ipvs: services\" -j KIPVS-SERVICES\nCOMMIT\n")
	checkRes(t, r.Resync(), 5, 1) // -save of both families, then save, restore, save
	jumps := rulesOf(f.Save("iptables-legacy"), "PREROUTING")
	if len(jumps) != 1 {
		t.Errorf("PREROUTING after Resync: %q", jumps)
	}
}

func TestApplyRemovesStaleJumpsAndChains(t *testing.T) {
	f := NewFakeExec()
	f.Load("iptables-nft", others)
	f.Load("iptables-nft", "*raw\n:KIPVS-OLD - [0:0]\n-A KIPVS-OLD -j ACCEPT\n-A PREROUTING -j KIPVS-OLD\nCOMMIT\n")
	r := New(f, Config{})
	checkRes(t, r.Apply(rulesV1, ""), 8, 1) // four -save to detect, save, restore, save, ip6tables-save
	s := f.Save("iptables-nft")
	if strings.Contains(s, "KIPVS-OLD") {
		t.Errorf("stale chain left:\n%s", s)
	}
	if !strings.Contains(s, "-A KUBE-FIREWALL") {
		t.Errorf("someone else's rules removed:\n%s", s)
	}
}

// An unused family is cleared of our rules once (a node that was dual-stack), then costs
// nothing.
func TestApplyEmptyFamilyClearsItOnce(t *testing.T) {
	f := NewFakeExec()
	f.Load("ip6tables-nft", rulesV1)
	f.Load("ip6tables-nft", others)
	r := New(f, Config{Backend: NFT})
	checkRes(t, r.Apply(rulesV1, ""), 5, 2) // v4: save, restore, save; v6: save, restore
	if s := f.Save("ip6tables-nft"); strings.Contains(s, "KIPVS-") || !strings.Contains(s, "KUBE-FIREWALL") {
		t.Errorf("ip6tables after Apply with no IPv6 rules:\n%s", s)
	}
	checkRes(t, r.Apply(rulesV1, ""), 0, 0)
	// Enabling the family again applies it; disabling it clears it again.
	checkRes(t, r.Apply(rulesV1, rulesV1), 3, 1)
	checkRes(t, r.Apply(rulesV1, ""), 2, 1)
	if s := f.Save("ip6tables-nft"); strings.Contains(s, "KIPVS-") {
		t.Errorf("ip6tables still has our rules:\n%s", s)
	}
	checkRes(t, r.Resync(), 1, 0)
}

func TestApplyRefusesForeignRules(t *testing.T) {
	for _, text := range []string{
		"*filter\n-A INPUT -j ACCEPT\nCOMMIT\n",
		"*filter\n:KUBE-X - [0:0]\nCOMMIT\n",
		"*filter\n-I INPUT 2 -j KIPVS-INPUT\nCOMMIT\n",
		"*filter\n-I INPUT 1 -j ACCEPT\nCOMMIT\n",
		"*filter\n-P INPUT DROP\nCOMMIT\n",
	} {
		f := NewFakeExec()
		r := New(f, Config{Backend: NFT})
		if res := r.Apply(text, text); res.Err == nil || res.Execs != 0 {
			t.Errorf("Apply(%q) = %+v, want a refusal before running anything", text, res)
		}
	}
}

func TestApplyFailureIsRetried(t *testing.T) {
	f := NewFakeExec()
	r := New(f, Config{Backend: NFT})
	bad := "*filter\n:KIPVS-INPUT - [0:0]\n-A KIPVS-INPUT -j KIPVS-MISSING\nCOMMIT\n"
	res := r.Apply(bad, "")
	if res.Err == nil || !strings.Contains(res.Err.Error(), "input line 3: -A KIPVS-INPUT -j KIPVS-MISSING") {
		t.Errorf("error %v does not quote the failing line", res.Err)
	}
	if res := r.Apply(bad, ""); res.Restores != 1 {
		t.Errorf("a failed text is not retried: %+v", res)
	}
	f.Fail = func(name string) error {
		if strings.HasSuffix(name, "-restore") {
			return errors.New("xtables lock held")
		}
		return nil
	}
	if res := r.Apply(rulesV1, ""); res.Err == nil {
		t.Error("a failing restore is not reported")
	}
	f.Fail = nil
	checkRes(t, r.Apply(rulesV1, ""), 3, 1)
}

func TestCleanupRemovesOnlyOurs(t *testing.T) {
	f := NewFakeExec()
	f.Load("iptables-legacy", others)
	f.Load("iptables-legacy", rulesV1)
	f.Load("iptables-nft", rulesV1)
	f.Load("ip6tables-nft", others)
	r := New(f, Config{Backend: NFT})
	res := r.Cleanup()
	if res.Err != nil || res.Restores != 2 {
		t.Errorf("Cleanup: %+v", res)
	}
	for _, p := range []string{"iptables-legacy", "iptables-nft", "ip6tables-legacy", "ip6tables-nft"} {
		if s := f.Save(p); strings.Contains(s, "KIPVS-") {
			t.Errorf("%s still has our rules:\n%s", p, s)
		}
	}
	if got := rulesOf(f.Save("iptables-legacy"), "INPUT"); len(got) != 2 {
		t.Errorf("someone else's INPUT rules changed: %q", got)
	}
	if res := r.Cleanup(); res.Restores != 0 {
		t.Errorf("second Cleanup restored: %+v", res)
	}
}

// The real rendered rules go through the emulated tools: applied once, idempotent, jumps
// first, and identical for any number of Services (they do not depend on them).
func TestRenderedRulesThroughFake(t *testing.T) {
	f := NewFakeExec()
	f.Load("iptables-nft", others)
	r := New(f, Config{Backend: NFT})
	v4, v6 := firewall.RenderRules(firewall.Config{})
	checkRes(t, r.Apply(v4, v6), 6, 2)
	checkRes(t, r.Resync(), 2, 0)
	s := f.Save("iptables-nft")
	for _, c := range []string{"INPUT", "FORWARD"} {
		if got := rulesOf(s, c); len(got) == 0 || !strings.Contains(got[0], "-j KIPVS-") {
			t.Errorf("%s does not start with our jump: %q", c, got)
		}
	}
	if got := rulesOf(s, "INPUT"); len(got) != 3 {
		t.Errorf("INPUT: %q", got)
	}
	checkRes(t, r.Apply(v4, v6), 0, 0)
}

func TestTokens(t *testing.T) {
	got := Tokens(`-m comment --comment "a \"b\" c" -j  X`)
	if want := []string{"-m", "comment", "--comment", `a "b" c`, "-j", "X"}; !slices.Equal(got, want) {
		t.Errorf("tokens = %q", got)
	}
}

// A restarted proxy (a new Runner) that renders the same text adopts the rules already in
// the kernel without a restore; if they were tampered with, it restores them.
func TestRestartAdoptsIntactRulesWithoutRestore(t *testing.T) {
	text := "*filter\n:KIPVS-INPUT - [0:0]\n-I INPUT 1 -j KIPVS-INPUT\n-A KIPVS-INPUT -p tcp --dport 1 -j ACCEPT\n-A KIPVS-INPUT -p tcp --dport 2 -j ACCEPT\nCOMMIT\n"
	f := NewFakeExec()
	if res := New(f, Config{Backend: NFT}).Apply(text, ""); res.Err != nil || res.Restores != 1 {
		t.Fatalf("first apply: %+v", res)
	}
	if res := New(f, Config{Backend: NFT}).Apply(text, ""); res.Err != nil || res.Restores != 0 {
		t.Errorf("a restart with the same rules restored them: %+v", res)
	}
	// Different text: restored.
	other := strings.Replace(text, "--dport 2", "--dport 3", 1)
	if res := New(f, Config{Backend: NFT}).Apply(other, ""); res.Err != nil || res.Restores != 1 {
		t.Errorf("changed rules were not restored: %+v", res)
	}
	// Someone deleted one of our rules: the next process restores.
	r := New(f, Config{Backend: NFT})
	r.Apply(other, "")
	if _, err := f.Run([]byte("*filter\n-D KIPVS-INPUT -p tcp --dport 1 -j ACCEPT\nCOMMIT\n"), "iptables-nft-restore", "--noflush"); err != nil {
		t.Fatal(err)
	}
	if res := New(f, Config{Backend: NFT}).Apply(other, ""); res.Err != nil || res.Restores != 1 {
		t.Errorf("tampered rules were adopted: %+v", res)
	}
}

// A listing that fails once (the ruleset changed while iptables-nft-save read it) is taken
// again; one that keeps failing is an error after three attempts.
func TestSaveIsRetriedAfterATransientFailure(t *testing.T) {
	fx := NewFakeExec()
	fails := 1
	fx.Fail = func(name string) error {
		if strings.HasSuffix(name, "-save") && fails > 0 {
			fails--
			return errors.New("Set with index 1 in kernel doesn't exist")
		}
		return nil
	}
	tools := NewTools(fx, Config{Backend: NFT})
	if _, err := tools.Save(V4); err != nil {
		t.Fatalf("a save that failed once: %v", err)
	}
	fails = 5
	if _, err := tools.Save(V4); err == nil {
		t.Fatal("a save that keeps failing succeeded")
	}
	if fails != 2 {
		t.Errorf("%d failures left, want 2 (three attempts)", fails)
	}
}

//go:build guest

package e2e

import (
	"encoding/json"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/kube-ipvs/kube-ipvs/test/guestutil"
)

// foreignRules are other components' rules and chains, and what kube-proxy's IPVS mode left
// (KUBE-SERVICES, KUBE-MARK-MASQ, a per-Service chain, KUBE-IPVS-FILTER, their jumps, rules
// on its sets): restore input for one tool, SET being FOREIGN-SET or FOREIGN-SET6 and KSET
// KUBE-CLUSTER-IP or KUBE-6-CLUSTER-IP. kubelet's KUBE-FIREWALL and KUBE-KUBELET-CANARY
// are KUBE-* chains that are not kube-proxy's. kube-proxy's rules never match (its sets are
// empty), so they do not change the traffic of the test.
const foreignRules = `*filter
:FOREIGN-CHAIN - [0:0]
:KUBE-FIREWALL - [0:0]
:KUBE-KUBELET-CANARY - [0:0]
:KUBE-IPVS-FILTER - [0:0]
-A INPUT -j FOREIGN-CHAIN
-A INPUT -j KUBE-FIREWALL
-A INPUT -m comment --comment "kubernetes ipvs access filter" -j KUBE-IPVS-FILTER
-A FOREIGN-CHAIN -m set --match-set SET src -j RETURN
-A KUBE-FIREWALL -s NET -j DROP
-A KUBE-IPVS-FILTER -m set --match-set KSET dst,dst -j RETURN
COMMIT
*nat
:KUBE-SERVICES - [0:0]
:KUBE-MARK-MASQ - [0:0]
:KUBE-SVC-ABCDEFGHIJKLMNOP - [0:0]
-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A OUTPUT -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A KUBE-SERVICES -m set --match-set KSET dst,dst -j KUBE-SVC-ABCDEFGHIJKLMNOP
-A KUBE-SVC-ABCDEFGHIJKLMNOP -j KUBE-MARK-MASQ
-A KUBE-MARK-MASQ -j MARK --or-mark 0x4000
COMMIT
`

// The foreign objects the test adds; every one must survive every cleanup.
const (
	foreignVIP4 = "192.0.2.80"
	foreignVIP6 = "2001:db8::80"
)

var foreignSets = []string{"FOREIGN-SET", "FOREIGN-SET6", "KUBE-SRC-FOREIGN"}

// addForeignState adds, next to what kube-ipvs programs, objects that are not its own: a
// dummy link (down, as kube-ipvs0: no link-local address) with one address per family and
// virtual servers on them (one real server, a backend pod), a virtual server on the node
// IP outside the NodePort range, sets, and in both families and on both backends a chain
// with a rule on a set and a jump to it; plus kube-proxy's leftovers (foreignRules, its
// sets KUBE-CLUSTER-IP and KUBE-6-CLUSTER-IP).
func addForeignState(t *testing.T) {
	t.Helper()
	flushFirewall(t)
	addForeignLink(t, "foreign0", foreignVIP4+"/32", foreignVIP6+"/128")
	mustRun(t, "", "ipvsadm", "-A", "-t", foreignVIP4+":8080", "-s", "rr")
	mustRun(t, "", "ipvsadm", "-a", "-t", foreignVIP4+":8080", "-r", "10.244.6.11:8080", "-m")
	mustRun(t, "", "ipvsadm", "-A", "-t", "["+foreignVIP6+"]:8080", "-s", "rr")
	mustRun(t, "", "ipvsadm", "-a", "-t", "["+foreignVIP6+"]:8080", "-r", "[fd00:244:6::11]:8080", "-m")
	mustRun(t, "", "ipvsadm", "-A", "-t", nodeIP+":8081", "-s", "rr")
	mustRun(t, "", "ipset", "create", "FOREIGN-SET", "hash:ip")
	mustRun(t, "", "ipset", "create", "FOREIGN-SET6", "hash:ip", "family", "inet6")
	mustRun(t, "", "ipset", "create", "KUBE-SRC-FOREIGN", "hash:ip")
	mustRun(t, "", "ipset", "create", "KUBE-CLUSTER-IP", "hash:ip,port")
	mustRun(t, "", "ipset", "create", "KUBE-6-CLUSTER-IP", "hash:ip,port", "family", "inet6")
	for _, tool := range saveTools {
		r := strings.NewReplacer("KSET", "KUBE-CLUSTER-IP", "SET", "FOREIGN-SET", "NET", "192.0.2.199/32")
		if strings.HasPrefix(tool, "ip6") {
			r = strings.NewReplacer("KSET", "KUBE-6-CLUSTER-IP", "SET", "FOREIGN-SET6", "NET", "2001:db8::199/128")
		}
		mustRun(t, r.Replace(foreignRules), tool+"-restore", "--noflush")
	}
}

// cleanupServices writes an IPv4 ClusterIP, an IPv4 NodePort and an IPv6 ClusterIP Service
// over two dual-stack backends, and returns the client pod.
func cleanupServices(t *testing.T, dir string) *guestutil.Pod {
	t.Helper()
	for i, name := range []string{"cb1", "cb2"} {
		p := guestutil.NewPod(t, name, netip.MustParseAddr("10.244.6.1"+string(rune('1'+i))), netip.MustParseAddr("fd00:244:6::1"+string(rune('1'+i))))
		p.ServeTCP(t, 8080, name)
	}
	v6 := serviceYAML(svcOpts{name: "cl6", clusterIP: "fd00:96::60", port: 80, targetPort: 8080})
	writeManifests(t, dir, "svc.yaml",
		serviceYAML(svcOpts{name: "cl4", clusterIP: "10.96.60.1", port: 80, targetPort: 8080}),
		sliceYAML("cl4", "cl4-1", "TCP", 8080, "", eps("10.244.6.11", "10.244.6.12")...),
		serviceYAML(svcOpts{name: "cln", typ: "NodePort", clusterIP: "10.96.60.2", port: 80, targetPort: 8080, nodePort: 30090}),
		sliceYAML("cln", "cln-1", "TCP", 8080, "", eps("10.244.6.11", "10.244.6.12")...),
		strings.Replace(v6, "  type: ClusterIP\n", "  type: ClusterIP\n  ipFamilies: [IPv6]\n", 1),
		sliceYAML("cl6", "cl6-1", "TCP", 8080, "IPv6", eps("fd00:244:6::11", "fd00:244:6::12")...))
	return guestutil.NewPod(t, "cbc", netip.MustParseAddr("10.244.9.7"), netip.MustParseAddr("fd00:244:9::7"))
}

// Services balance over both backends.
func expectBalanced(t *testing.T, cli *guestutil.Pod, targets ...string) {
	t.Helper()
	for _, to := range targets {
		if got := ask(t, cli, to, 4); got["cb1"] != 2 || got["cb2"] != 2 {
			t.Errorf("%s: answers %v, want 2 from each backend", to, got)
		}
	}
}

// `kube-ipvs cleanup` removes exactly kube-ipvs' objects, in both families and on both
// iptables backends, and `--kube-proxy` exactly kube-proxy's leftovers: with foreign
// objects of every kind present, a dry run changes nothing, cleanup refuses while the
// proxy runs, and afterwards every owned object is gone, every foreign one intact, and a
// connection held through a foreign virtual server still works.
func TestCleanupRemovesOnlyWhatIsOwned(t *testing.T) {
	dir := setupNode(t)
	cli := cleanupServices(t, dir)
	addForeignState(t)
	// kube-ipvs' rules on the legacy backend too, as on a node that switched backends.
	mustRun(t, "", binary, "run", "--once", "--manifests", dir, "--hostname-override", nodeName, "--iptables-backend", "legacy")
	p := startProxy(t, dir, "--iptables-backend", "nft")
	eventually(t, 20*time.Second, "the Services", func() bool {
		return realServers(vsBlock(t, "TCP", "[fd00:96::60]:80")) == 2 && realServers(vsBlock(t, "TCP", nodeIP+":30090")) == 2
	})
	p.waitLog(`sync done`)
	expectBalanced(t, cli, "10.96.60.1:80", "[fd00:96::60]:80", nodeIP+":30090")

	cleanupKubeProxyWhileRunning(t, cli)
	cleanupRefusedWhileRunning(t)

	held, err := cli.DialTCP(netip.MustParseAddrPort(foreignVIP4 + ":8080"))
	if err != nil {
		t.Fatalf("connecting through the foreign virtual server: %v", err)
	}
	defer held.Close()
	p.stop()
	cleanupDryRunChangesNothing(t)
	cleanupRemovesOwned(t)

	if got, err := held.Ask(); err != nil || got != "cb1" {
		t.Errorf("the connection held through the foreign virtual server: %q, %v", got, err)
	}
	for _, to := range []string{foreignVIP4 + ":8080", "[" + foreignVIP6 + "]:8080"} {
		if got := ask(t, cli, to, 2); got["cb1"] != 2 {
			t.Errorf("new connections through the foreign virtual server %s: %v", to, got)
		}
	}
	if code, out, _ := runCleanup(t); code != 0 || strings.TrimSpace(out) != "nothing to remove" {
		t.Errorf("a second cleanup: exit %d, %q", code, out)
	}
}

// cleanupKubeProxyWhileRunning: --kube-proxy needs no lock, lists and removes kube-proxy's
// chains, jumps and sets only, and the proxy's Services keep working.
func cleanupKubeProxyWhileRunning(t *testing.T, cli *guestutil.Pod) {
	t.Helper()
	before := nodeState(t)
	code, out, _ := runCleanup(t, "--kube-proxy", "--dry-run")
	if code != 0 || nodeState(t) != before {
		t.Fatalf("--kube-proxy --dry-run: exit %d, or it changed the node", code)
	}
	for _, tool := range saveTools {
		for _, want := range []string{tool + " nat KUBE-SERVICES", tool + " nat KUBE-MARK-MASQ", tool + " nat KUBE-SVC-ABCDEFGHIJKLMNOP",
			tool + " filter KUBE-IPVS-FILTER", tool + " nat -A PREROUTING", tool + " filter -A INPUT"} {
			if !strings.Contains(out, "would remove ") || !strings.Contains(out, want) {
				t.Errorf("--kube-proxy --dry-run does not list %q", want)
			}
		}
	}
	if code, _, _ = runCleanup(t, "--kube-proxy"); code != 0 {
		t.Fatalf("--kube-proxy: exit %d", code)
	}
	for _, tool := range saveTools {
		s := saved(t, tool)
		for _, gone := range []string{"KUBE-SERVICES", "KUBE-MARK-MASQ", "KUBE-SVC-", "KUBE-IPVS-FILTER", "KUBE-CLUSTER-IP dst", "KUBE-6-CLUSTER-IP dst"} {
			if strings.Contains(s, gone) {
				t.Errorf("%s still has %s:\n%s", tool, gone, s)
			}
		}
		for _, kept := range []string{"-A INPUT -j FOREIGN-CHAIN", "-A INPUT -j KUBE-FIREWALL", ":KUBE-KUBELET-CANARY", "KIPVS-SERVICES"} {
			if !strings.Contains(s, kept) {
				t.Errorf("%s lost %q:\n%s", tool, kept, s)
			}
		}
	}
	sets := strings.Join(ipsetNames(t), " ")
	if strings.Contains(sets, "KUBE-CLUSTER-IP") || strings.Contains(sets, "KUBE-6-CLUSTER-IP") || !strings.Contains(sets, "KIPVS-CLUSTER-IP") ||
		!strings.Contains(sets, "KUBE-SRC-FOREIGN") {
		t.Errorf("sets after --kube-proxy: %s", sets)
	}
	expectBalanced(t, cli, "10.96.60.1:80", "[fd00:96::60]:80", nodeIP+":30090")
}

// cleanupRefusedWhileRunning: without --kube-proxy, cleanup refuses while a run holds the
// lock and changes nothing.
func cleanupRefusedWhileRunning(t *testing.T) {
	t.Helper()
	before := nodeState(t)
	code, _, stderr := runCleanup(t)
	if code != 1 || !strings.Contains(stderr, "a kube-ipvs run is active on this node") || !strings.Contains(stderr, "--force") {
		t.Errorf("cleanup while the proxy runs: exit %d, %q", code, stderr)
	}
	if after := nodeState(t); after != before {
		t.Errorf("a refused cleanup changed the node:\n--- before ---\n%s\n--- after ---\n%s", before, after)
	}
}

// ownedLines are (parts of) the lines a cleanup prints for kube-ipvs' objects.
func ownedLines() []string {
	want := []string{"virtual-server TCP 10.96.60.1:80 ", "virtual-server TCP 10.96.60.2:80 ", "virtual-server TCP [fd00:96::60]:80 ",
		"virtual-server TCP " + nodeIP + ":30090 ", "virtual-server TCP " + foreignVIP4 + ":30090 ",
		"address 10.96.60.1/32 on kube-ipvs0", "address fd00:96::60/128 on kube-ipvs0", "link kube-ipvs0 ",
		"ipset KIPVS-CLUSTER-IP ", "ipset KIPVS-CLUSTER-IP-6 "}
	for _, tool := range saveTools {
		want = append(want, "chain "+tool+" nat KIPVS-SERVICES ", "rule "+tool+" nat -A PREROUTING ", "chain "+tool+" filter KIPVS-INPUT ")
	}
	return want
}

// cleanupDryRunChangesNothing: a dry run lists every owned object and no foreign one, and
// changes nothing.
func cleanupDryRunChangesNothing(t *testing.T) {
	t.Helper()
	before := nodeState(t)
	code, out, _ := runCleanup(t, "--dry-run")
	if code != 0 {
		t.Fatalf("--dry-run: exit %d", code)
	}
	if after := nodeState(t); after != before {
		t.Fatalf("--dry-run changed the node:\n--- before ---\n%s\n--- after ---\n%s", before, after)
	}
	for _, want := range ownedLines() {
		if !strings.Contains(out, "would remove "+want) {
			t.Errorf("--dry-run does not list %q", want)
		}
	}
	for _, foreign := range []string{"FOREIGN", "KUBE-", foreignVIP4 + ":8080", foreignVIP6, ":8081", "foreign0"} {
		if strings.Contains(out, foreign) {
			t.Errorf("--dry-run would remove a foreign object (%s)", foreign)
		}
	}
}

// cleanupRemovesOwned: the real cleanup (-o json) removes every owned object and leaves
// every foreign one.
func cleanupRemovesOwned(t *testing.T) {
	t.Helper()
	code, out, _ := runCleanup(t, "-o", "json")
	var rep struct {
		DryRun  bool `json:"dryRun"`
		Failed  int  `json:"failed"`
		Objects []struct{ Kind, Name string }
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != 0 || rep.Failed != 0 || rep.DryRun || len(rep.Objects) < len(ownedLines()) {
		t.Fatalf("cleanup -o json: exit %d, %v, %+v", code, err, rep)
	}
	vs := mustRun(t, "", "ipvsadm", "-Sn")
	for _, gone := range []string{"10.96.60.", "fd00:96::60", ":30090"} {
		if strings.Contains(vs, gone) {
			t.Errorf("IPVS still has %s:\n%s", gone, vs)
		}
	}
	for _, kept := range []string{foreignVIP4 + ":8080", "[" + foreignVIP6 + "]:8080", nodeIP + ":8081"} {
		if !strings.Contains(vs, kept) {
			t.Errorf("the foreign virtual server %s is gone:\n%s", kept, vs)
		}
	}
	if linkAddrs(t, "kube-ipvs0") != nil {
		t.Error("kube-ipvs0 is still there")
	}
	if got := strings.Join(linkAddrs(t, "foreign0"), " "); got != foreignVIP4+"/32 "+foreignVIP6+"/128" {
		t.Errorf("foreign0's addresses: %s", got)
	}
	if got := strings.Join(ipsetNames(t), " "); got != strings.Join(foreignSets, " ") {
		t.Errorf("sets left: %s, want %v", got, foreignSets)
	}
	for _, tool := range saveTools {
		s := saved(t, tool)
		if strings.Contains(s, "KIPVS-") {
			t.Errorf("%s still has KIPVS- rules:\n%s", tool, s)
		}
		for _, kept := range []string{":FOREIGN-CHAIN", "-A INPUT -j FOREIGN-CHAIN", "-A FOREIGN-CHAIN -m set --match-set FOREIGN-SET", "-A INPUT -j KUBE-FIREWALL", ":KUBE-KUBELET-CANARY"} {
			if !strings.Contains(s, kept) {
				t.Errorf("%s lost %q:\n%s", tool, kept, s)
			}
		}
	}
}

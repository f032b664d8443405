//go:build guest

package e2e

import (
	"net/netip"
	"regexp"
	"strings"
	"testing"

	"github.com/kube-ipvs/kube-ipvs/test/guestutil"
	"github.com/kube-ipvs/kube-ipvs/test/netnstest"
)

// kubeProxyIPVSRules is what kube-proxy's IPVS mode writes for one NodePort Service (nat:
// the service portals, NodePort traffic marked and masqueraded; filter: its access filter
// and forward rules), for iptables-nft-restore --noflush. Its masquerade is real: the
// connection the test holds through the NodePort before kube-ipvs starts is masqueraded by
// these rules, and conntrack carries its NAT afterwards.
const kubeProxyIPVSRules = `*nat
:KUBE-SERVICES - [0:0]
:KUBE-POSTROUTING - [0:0]
:KUBE-NODE-PORT - [0:0]
:KUBE-MARK-MASQ - [0:0]
:KUBE-LOAD-BALANCER - [0:0]
-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A OUTPUT -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A POSTROUTING -m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING
-A KUBE-SERVICES -m comment --comment "Kubernetes service cluster ip + port for masquerade purpose" -m set --match-set KUBE-CLUSTER-IP dst,dst -j ACCEPT
-A KUBE-SERVICES -m addrtype --dst-type LOCAL -j KUBE-NODE-PORT
-A KUBE-NODE-PORT -p tcp -m comment --comment "Kubernetes nodeport TCP port for masquerade purpose" -m set --match-set KUBE-NODE-PORT-TCP dst -j KUBE-MARK-MASQ
-A KUBE-MARK-MASQ -j MARK --or-mark 0x4000
-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN
-A KUBE-POSTROUTING -j MARK --xor-mark 0x4000
-A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE --random-fully
COMMIT
*filter
:KUBE-FORWARD - [0:0]
:KUBE-IPVS-FILTER - [0:0]
:KUBE-PROXY-FIREWALL - [0:0]
:KUBE-NODE-PORT - [0:0]
-A INPUT -m comment --comment "kubernetes ipvs access filter" -j KUBE-IPVS-FILTER
-A INPUT -m comment --comment "kube-proxy firewall rules" -j KUBE-PROXY-FIREWALL
-A INPUT -m comment --comment "kubernetes health check rules" -j KUBE-NODE-PORT
-A FORWARD -m comment --comment "kubernetes forwarding rules" -j KUBE-FORWARD
-A KUBE-FORWARD -m comment --comment "kubernetes forwarding rules" -m mark --mark 0x4000/0x4000 -j ACCEPT
-A KUBE-IPVS-FILTER -m set --match-set KUBE-CLUSTER-IP dst,dst -j RETURN
-A KUBE-IPVS-FILTER -m set --match-set KUBE-NODE-PORT-TCP dst -j RETURN
-A KUBE-IPVS-FILTER -m conntrack --ctstate NEW -m set --match-set KUBE-IPVS-IPS dst -j REJECT --reject-with icmp-port-unreachable
COMMIT
`

const (
	hoClusterIP = "10.96.70.1"
	hoNodePort  = 30070
)

// kubeProxyLeftovers programs what a stopped kube-proxy in IPVS mode leaves for the
// Service: kube-ipvs0 with the ClusterIP, the two virtual servers over both backends, its
// ipsets and its rules.
func kubeProxyLeftovers(t *testing.T, backends ...string) {
	t.Helper()
	run := func(args ...string) { t.Helper(); mustRun(t, "", args[0], args[1:]...) }
	run("ip", "link", "add", "kube-ipvs0", "type", "dummy")
	run("ip", "addr", "add", hoClusterIP+"/32", "dev", "kube-ipvs0")
	for _, vs := range []string{hoClusterIP + ":80", nodeIP + ":30070"} {
		run("ipvsadm", "-A", "-t", vs, "-s", "rr")
		for _, b := range backends {
			run("ipvsadm", "-a", "-t", vs, "-r", b+":8080", "-m", "-w", "1")
		}
	}
	// As kube-proxy: IPVS connections go through conntrack, so the nat rules apply to them.
	guestutil.WriteSysctl(t, "net.ipv4.vs.conntrack", "1")
	run("ipset", "create", "KUBE-CLUSTER-IP", "hash:ip,port")
	run("ipset", "add", "KUBE-CLUSTER-IP", hoClusterIP+",tcp:80")
	run("ipset", "create", "KUBE-NODE-PORT-TCP", "bitmap:port", "range", "0-65535")
	run("ipset", "add", "KUBE-NODE-PORT-TCP", "30070")
	run("ipset", "create", "KUBE-IPVS-IPS", "hash:ip")
	run("ipset", "add", "KUBE-IPVS-IPS", hoClusterIP)
	run("ipset", "create", "KUBE-6-CLUSTER-IP", "hash:ip,port", "family", "inet6")
	mustRun(t, kubeProxyIPVSRules, "iptables-nft-restore", "--noflush")
}

// `kube-ipvs run --cleanup-kube-proxy` on a node kube-proxy's IPVS mode left: the proxy
// adopts kube-proxy's virtual servers and, after its first full sync, removes kube-proxy's
// chains, rules and ipsets and nothing of its own; a connection held through the NodePort
// (masqueraded by kube-proxy's rules) and one through the ClusterIP keep answering from the
// same backend, and new connections are balanced over both backends.
func TestRunCleanupKubeProxyAfterTheFirstSync(t *testing.T) {
	// A node of its own: the rules and sets stay out of the guest's root namespace.
	guestutil.EnterNode(t, netip.MustParseAddr(nodeIP))
	dir := t.TempDir()
	writeManifests(t, dir, "node.yaml", "apiVersion: v1\nkind: Node\nmetadata:\n  name: "+nodeName+"\n")
	for i, name := range []string{"cb1", "cb2"} {
		p := guestutil.NewPod(t, name, netip.MustParseAddr("10.244.7.1"+string(rune('1'+i))))
		p.ServeTCP(t, 8080, name)
	}
	cli := guestutil.NewPod(t, "hoc", netip.MustParseAddr("10.244.9.8"))
	writeManifests(t, dir, "svc.yaml",
		serviceYAML(svcOpts{name: "ho", typ: "NodePort", clusterIP: hoClusterIP, port: 80, targetPort: 8080, nodePort: hoNodePort}),
		sliceYAML("ho", "ho-1", "TCP", 8080, "", eps("10.244.7.11", "10.244.7.12")...))
	kubeProxyLeftovers(t, "10.244.7.11", "10.244.7.12")
	table := netnstest.Run(t, "ipvsadm", "-Sn")

	nodePort := nodeIP + ":30070"
	held := map[string]*guestutil.Conn{}
	first := map[string]string{}
	for _, to := range []string{nodePort, hoClusterIP + ":80"} {
		c, err := cli.DialTCP(netip.MustParseAddrPort(to))
		if err != nil {
			t.Fatalf("connecting through kube-proxy's %s: %v", to, err)
		}
		t.Cleanup(func() { c.Close() })
		if first[to], err = c.Ask(); err != nil {
			t.Fatalf("the connection through kube-proxy's %s: %v", to, err)
		}
		held[to] = c
	}
	if n := len(conntrackMasqueraded(t, "10.244.9.8")); n != 1 {
		t.Fatalf("%d masqueraded connections in conntrack before kube-ipvs; want the NodePort one", n)
	}

	p := startProxy(t, dir, "--iptables-backend", "nft", "--cleanup-kube-proxy")
	done := p.waitLog(`msg="kube-proxy's leftovers removed after the first full sync".*chains=(\d+) rules=(\d+) ipsets=(\d+)`)
	if done[1] != "9" || done[2] != "7" || done[3] != "4" {
		t.Errorf("removed %s chains, %s rules, %s ipsets; want 9, 7, 4", done[1], done[2], done[3])
	}
	p.waitLog(`msg="sync done" full=true`) // read the log once the first sync is in it, wherever
	log := p.Log()
	syncAt, cleanAt := strings.Index(log, `msg="sync done" full=true`), strings.Index(log, `msg="removed kube-proxy's object"`)
	if syncAt < 0 || cleanAt < syncAt {
		t.Errorf("the first removal (at %d) does not follow the first full sync (at %d)", cleanAt, syncAt)
	}
	if m := regexp.MustCompile(`msg="sync done" full=true .*ipvs_writes=(\d+) addr_writes=(\d+)`).FindStringSubmatch(log); m == nil || m[1] != "0" || m[2] != "0" {
		t.Errorf("the first sync wrote to IPVS or kube-ipvs0 (%q): kube-proxy's virtual servers were not adopted", m)
	}
	p.waitLog(`reason=KubeProxyCleanedUp`)
	// The next two periodic repairs find nothing of kube-ipvs' to put back: the cleanup
	// removed nothing of its own (the first may have begun before the cleanup).
	mark := len(p.Log())
	var repairs []string
	eventually(t, firstSync, "two repair cycles after the cleanup", func() bool {
		repairs = regexp.MustCompile(`msg="repair cycle done".*`).FindAllString(p.Log()[mark:], -1)
		return len(repairs) >= 2
	})
	for _, r := range repairs {
		if !strings.Contains(r, "ipvs_writes=0 addr_writes=0 ipset_writes=0 iptables_restores=0 errors=0") {
			t.Errorf("a repair after the cleanup wrote: %s", r)
		}
	}
	for _, tool := range saveTools {
		s := saved(t, tool)
		if strings.Contains(s, "KUBE-") {
			t.Errorf("%s still has kube-proxy's objects:\n%s", tool, s)
		}
	}
	nft := saved(t, "iptables-nft")
	for _, ours := range []string{"KIPVS-SERVICES", "KIPVS-POSTROUTING", "-A PREROUTING"} {
		if !strings.Contains(nft, ours) {
			t.Errorf("iptables-nft lost kube-ipvs' %q:\n%s", ours, nft)
		}
	}
	sets := strings.Join(ipsetNames(t), " ")
	if strings.Contains(sets, "KUBE-") || !strings.Contains(sets, "KIPVS-CLUSTER-IP") {
		t.Errorf("sets after the cleanup: %s", sets)
	}
	if got := netnstest.Run(t, "ipvsadm", "-Sn"); got != table {
		t.Errorf("the IPVS table changed:\n--- kube-proxy's ---\n%s\n--- now ---\n%s", table, got)
	}

	for to, c := range held {
		if got, err := c.Ask(); err != nil || got != first[to] {
			t.Errorf("the connection held through %s: %q, %v; want %q", to, got, err, first[to])
		}
	}
	expectBalanced(t, cli, hoClusterIP+":80", nodePort)
	if n := strings.Count(p.Log(), `msg="kube-proxy's leftovers removed`); n != 1 {
		t.Errorf("the cleanup ran %d times; want once", n)
	}
}

// conntrackMasqueraded lists the established NodePort connections whose replies go to
// another address than the client's: the source was rewritten, masqueraded.
func conntrackMasqueraded(t *testing.T, client string) []string {
	t.Helper()
	var out []string
	for _, l := range strings.Split(mustRun(t, "", "conntrack", "-L", "-p", "tcp"), "\n") {
		f := strings.Fields(l)
		var dsts []string
		for _, x := range f {
			if d, ok := strings.CutPrefix(x, "dst="); ok {
				dsts = append(dsts, d)
			}
		}
		if strings.Contains(l, "dport=30070") && strings.Contains(l, "ESTABLISHED") && len(dsts) == 2 && dsts[1] != client {
			out = append(out, l)
		}
	}
	return out
}

// kubeProxyIPTablesRules is what kube-proxy's iptables mode writes for one NodePort
// Service over two endpoints (nat: portals, per-Service and per-endpoint chains with their
// DNAT, NodePort masquerade; filter: its firewall, forward and portal chains).
const kubeProxyIPTablesRules = `*nat
:KUBE-SERVICES - [0:0]
:KUBE-NODEPORTS - [0:0]
:KUBE-POSTROUTING - [0:0]
:KUBE-MARK-MASQ - [0:0]
:KUBE-SVC-AAAAAAAAAAAAAAAA - [0:0]
:KUBE-EXT-AAAAAAAAAAAAAAAA - [0:0]
:KUBE-SEP-BBBBBBBBBBBBBBBB - [0:0]
:KUBE-SEP-CCCCCCCCCCCCCCCC - [0:0]
-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A OUTPUT -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A POSTROUTING -m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING
-A KUBE-SERVICES -d 10.96.71.1/32 -p tcp -m tcp --dport 80 -j KUBE-SVC-AAAAAAAAAAAAAAAA
-A KUBE-SERVICES -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS
-A KUBE-NODEPORTS -p tcp -m tcp --dport 30071 -j KUBE-EXT-AAAAAAAAAAAAAAAA
-A KUBE-EXT-AAAAAAAAAAAAAAAA -j KUBE-MARK-MASQ
-A KUBE-EXT-AAAAAAAAAAAAAAAA -j KUBE-SVC-AAAAAAAAAAAAAAAA
-A KUBE-SVC-AAAAAAAAAAAAAAAA -m statistic --mode random --probability 0.5 -j KUBE-SEP-BBBBBBBBBBBBBBBB
-A KUBE-SVC-AAAAAAAAAAAAAAAA -j KUBE-SEP-CCCCCCCCCCCCCCCC
-A KUBE-SEP-BBBBBBBBBBBBBBBB -p tcp -j DNAT --to-destination 10.244.8.11:8080
-A KUBE-SEP-CCCCCCCCCCCCCCCC -p tcp -j DNAT --to-destination 10.244.8.12:8080
-A KUBE-MARK-MASQ -j MARK --or-mark 0x4000
-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN
-A KUBE-POSTROUTING -j MARK --xor-mark 0x4000
-A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE --random-fully
COMMIT
*filter
:KUBE-FORWARD - [0:0]
:KUBE-SERVICES - [0:0]
:KUBE-EXTERNAL-SERVICES - [0:0]
:KUBE-NODEPORTS - [0:0]
:KUBE-PROXY-FIREWALL - [0:0]
-A INPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes load balancer firewall" -j KUBE-PROXY-FIREWALL
-A INPUT -m comment --comment "kubernetes health check service ports" -j KUBE-NODEPORTS
-A INPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes externally visible service portals" -j KUBE-EXTERNAL-SERVICES
-A FORWARD -m conntrack --ctstate NEW -m comment --comment "kubernetes load balancer firewall" -j KUBE-PROXY-FIREWALL
-A FORWARD -m comment --comment "kubernetes forwarding rules" -j KUBE-FORWARD
-A FORWARD -m conntrack --ctstate NEW -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A FORWARD -m conntrack --ctstate NEW -m comment --comment "kubernetes externally visible service portals" -j KUBE-EXTERNAL-SERVICES
-A OUTPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes load balancer firewall" -j KUBE-PROXY-FIREWALL
-A OUTPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A KUBE-FORWARD -m conntrack --ctstate INVALID -j DROP
-A KUBE-FORWARD -m mark --mark 0x4000/0x4000 -j ACCEPT
COMMIT
`

// In the iptables fallback, --cleanup-kube-proxy removes what kube-proxy's iptables mode
// left (its KUBE-SVC-/KUBE-SEP- DNAT chains and the rest) after the fallback proxier's
// first full sync, and nothing of the proxier's KIPVS-* rules: connections held through
// kube-proxy's DNAT (the NodePort one masqueraded too) keep answering through their
// conntrack entries, and new connections reach both backends through kube-ipvs' rules.
func TestRunCleanupKubeProxyInTheIPTablesFallback(t *testing.T) {
	guestutil.EnterNode(t, netip.MustParseAddr(nodeIP))
	dir := t.TempDir()
	writeManifests(t, dir, "node.yaml", "apiVersion: v1\nkind: Node\nmetadata:\n  name: "+nodeName+"\n")
	for i, name := range []string{"cb1", "cb2"} {
		p := guestutil.NewPod(t, name, netip.MustParseAddr("10.244.8.1"+string(rune('1'+i))))
		p.ServeTCP(t, 8080, name)
	}
	cli := guestutil.NewPod(t, "hic", netip.MustParseAddr("10.244.9.9"))
	writeManifests(t, dir, "svc.yaml",
		serviceYAML(svcOpts{name: "hi", typ: "NodePort", clusterIP: "10.96.71.1", port: 80, targetPort: 8080, nodePort: 30071}),
		sliceYAML("hi", "hi-1", "TCP", 8080, "", eps("10.244.8.11", "10.244.8.12")...))
	mustRun(t, kubeProxyIPTablesRules, "iptables-nft-restore", "--noflush")

	clusterIP, nodePort := "10.96.71.1:80", nodeIP+":30071"
	held := map[string]*guestutil.Conn{}
	first := map[string]string{}
	for _, to := range []string{nodePort, clusterIP} {
		c, err := cli.DialTCP(netip.MustParseAddrPort(to))
		if err != nil {
			t.Fatalf("connecting through kube-proxy's rules to %s: %v", to, err)
		}
		t.Cleanup(func() { c.Close() })
		if first[to], err = c.Ask(); err != nil {
			t.Fatalf("the connection through kube-proxy's rules to %s: %v", to, err)
		}
		held[to] = c
	}

	p := startProxy(t, dir, "--mode", "iptables", "--iptables-backend", "nft", "--cleanup-kube-proxy")
	done := p.waitLog(`msg="kube-proxy's leftovers removed after the first full sync".*chains=(\d+) rules=(\d+) ipsets=(\d+)`)
	if done[1] != "13" || done[2] != "12" || done[3] != "0" {
		t.Errorf("removed %s chains, %s rules, %s ipsets; want 13, 12, 0", done[1], done[2], done[3])
	}
	p.waitLog(`msg="sync done" full=true`) // read the log once the first sync is in it, wherever
	log := p.Log()
	if !strings.Contains(log, "mode=iptables") {
		t.Fatalf("the proxy did not run in iptables mode:\n%s", log)
	}
	syncAt, cleanAt := strings.Index(log, `msg="sync done" full=true`), strings.Index(log, `msg="removed kube-proxy's object"`)
	if syncAt < 0 || cleanAt < syncAt {
		t.Errorf("the first removal (at %d) does not follow the first full sync (at %d)", cleanAt, syncAt)
	}
	for _, tool := range saveTools {
		if s := saved(t, tool); strings.Contains(s, "KUBE-") {
			t.Errorf("%s still has kube-proxy's objects:\n%s", tool, s)
		}
	}
	nft := saved(t, "iptables-nft")
	if !strings.Contains(nft, ":KIPVS-") || !strings.Contains(nft, "DNAT --to-destination 10.244.8.11:8080") || !strings.Contains(nft, "DNAT --to-destination 10.244.8.12:8080") {
		t.Errorf("iptables-nft lacks the fallback proxier's rules:\n%s", nft)
	}
	for to, c := range held {
		if got, err := c.Ask(); err != nil || got != first[to] {
			t.Errorf("the connection held through %s: %q, %v; want %q", to, got, err, first[to])
		}
	}
	for _, to := range []string{clusterIP, nodePort} {
		if got := ask(t, cli, to, 20); got["cb1"] == 0 || got["cb2"] == 0 || got["cb1"]+got["cb2"] != 20 {
			t.Errorf("20 new connections to %s: %v; want all answered, by both backends", to, got)
		}
	}
}

package cleanup

import (
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kube-ipvs/kube-ipvs/dataplane/ipvsmode"
	"github.com/kube-ipvs/kube-ipvs/dummyif"
	"github.com/kube-ipvs/kube-ipvs/firewall"
	"github.com/kube-ipvs/kube-ipvs/ipset"
	"github.com/kube-ipvs/kube-ipvs/iptables"
	"github.com/kube-ipvs/kube-ipvs/ipvs"
	"github.com/kube-ipvs/kube-ipvs/model"
)

// node is a node's kernel state over the fakes: what kube-ipvs left, what kube-proxy left,
// and objects of others with names and addresses close to both. KIPVS-SVC-... stands for
// the iptables fallback's per-Service chains, which carry the KIPVS- prefix too.
type node struct {
	vs    *ipvs.FakeKernel
	links *dummyif.FakeNetlink
	sets  *ipset.FakeKernel
	tools *iptables.FakeExec
}

func vsKey(s string, proto model.Protocol) model.VSKey {
	ap := netip.MustParseAddrPort(s)
	return model.VSKey{Addr: ap.Addr(), Proto: proto, Port: ap.Port()}
}

const nftV4 = `*nat
:PREROUTING ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:FOREIGN-NAT - [0:0]
:KIPVS-SERVICES - [0:0]
:KIPVS-POSTROUTING - [0:0]
:KIPVS-SVC-4Q2BZ6ZJ7DO2VVZ6 - [0:0]
:KUBE-SERVICES - [0:0]
:KUBE-MARK-MASQ - [0:0]
:KUBE-SVC-XPGD46QRK7WJZT7O - [0:0]
:KUBE-SVC-NOTAHASH - [0:0]
-A PREROUTING -j FOREIGN-NAT
-A PREROUTING -m comment --comment "kube-ipvs: services" -j KIPVS-SERVICES
-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A POSTROUTING -m comment --comment "kube-ipvs: masquerade" -j KIPVS-POSTROUTING
-A FOREIGN-NAT -d 192.0.2.50/32 -j ACCEPT
-A KIPVS-SERVICES -m set --match-set KIPVS-CLUSTER-IP dst,dst -j ACCEPT
-A KIPVS-SERVICES -d 10.96.0.10/32 -p tcp -m tcp --dport 80 -j KIPVS-SVC-4Q2BZ6ZJ7DO2VVZ6
-A KIPVS-SVC-4Q2BZ6ZJ7DO2VVZ6 -j DNAT --to-destination 10.244.1.1:8080
-A KIPVS-POSTROUTING -j MASQUERADE
-A KUBE-SERVICES -j KUBE-SVC-XPGD46QRK7WJZT7O
-A KUBE-SVC-XPGD46QRK7WJZT7O -j KUBE-MARK-MASQ
-A KUBE-SVC-NOTAHASH -j ACCEPT
COMMIT
*filter
:INPUT ACCEPT [0:0]
:KUBE-FIREWALL - [0:0]
:KUBE-KUBELET-CANARY - [0:0]
:KUBE-IPVS-FILTER - [0:0]
:KUBE-ROUTER-INPUT - [0:0]
-A INPUT -j KUBE-FIREWALL
-A INPUT -m comment --comment "kubernetes ipvs access filter" -j KUBE-IPVS-FILTER
-A INPUT -j KUBE-ROUTER-INPUT
-A KUBE-FIREWALL -d 127.0.0.0/8 -j DROP
-A KUBE-IPVS-FILTER -j REJECT
COMMIT
`

const legacyV6 = `*mangle
:PREROUTING ACCEPT [0:0]
:KIPVS-FIREWALL - [0:0]
-A PREROUTING -m comment --comment "kube-ipvs: firewall" -j KIPVS-FIREWALL
COMMIT
`

func newNode(t *testing.T) *node {
	t.Helper()
	n := &node{vs: ipvs.NewFakeKernel(), links: dummyif.NewFakeNetlink(), sets: ipset.NewFakeKernel(), tools: iptables.NewFakeExec()}
	for _, k := range []model.VSKey{
		vsKey("10.96.0.10:80", model.TCP),                                // a ClusterIP on kube-ipvs0
		vsKey("[fd00::10]:53", model.UDP),                                // an IPv6 ClusterIP on kube-ipvs0
		vsKey("10.96.0.99:80", model.TCP),                                // on kube-ipvs0, but excluded
		vsKey("203.0.113.10:30080", model.TCP),                           // a NodePort
		vsKey("203.0.113.10:8080", model.TCP),                            // a node IP, outside the NodePort range
		vsKey("192.0.2.50:8080", model.TCP),                              // on a foreign dummy
		vsKey("198.51.100.7:30080", model.TCP),                           // NodePort-range port, not a node IP
		model.FWMarkKey(model.InClusterMark(30080, model.TCP, -1), true), // an in-cluster mark of ours
		model.FWMarkKey(1, false),                                        // someone's ipvsadm -A -f 1
	} {
		n.vs.Put(&model.VirtualServer{Key: k, Spec: model.VSSpec{Scheduler: "rr"}})
	}
	n.links.PutLink("kube-ipvs0", "dummy")
	for _, p := range []string{"10.96.0.10/32", "fd00::10/128", "10.96.0.99/32"} {
		n.links.PutAddr("kube-ipvs0", netip.MustParsePrefix(p), 0)
	}
	n.links.PutLink("foreign0", "dummy")
	n.links.PutAddr("foreign0", netip.MustParsePrefix("192.0.2.50/32"), 0)
	for name, fam := range map[string]firewall.Family{
		"KIPVS-CLUSTER-IP": firewall.IPv4, "KIPVS-CLUSTER-IP-6": firewall.IPv6, "KIPVS-HEALTH-CHECK-NODE-PORT": firewall.AnyFamily,
		"KUBE-CLUSTER-IP": firewall.IPv4, "KUBE-6-LOAD-BALANCER-SOURCE-CID": firewall.IPv6,
		"FOREIGN-SET": firewall.IPv4, "KUBE-SRC-ROUTERPOLICY": firewall.IPv4,
	} {
		n.sets.Put(ipset.Spec{Name: firewall.SetName(name), Type: firewall.HashIP, Family: fam})
	}
	if err := n.tools.Load("iptables-nft", nftV4); err != nil {
		t.Fatal(err)
	}
	if err := n.tools.Load("ip6tables-legacy", legacyV6); err != nil {
		t.Fatal(err)
	}
	return n
}

func (n *node) kernel() Kernel {
	return Kernel{IPVS: n.vs, Links: n.links, Sets: n.sets, Tables: iptables.NewTools(n.tools, iptables.Config{})}
}

func testConfig(kubeProxy bool) Config {
	return Config{
		Dummy: "kube-ipvs0",
		Ownership: ipvsmode.Config{ExcludeCIDRs: []netip.Prefix{netip.MustParsePrefix("10.96.0.96/30")},
			NodePortMin: 30000, NodePortMax: 32767},
		NodeIPs:   []netip.Addr{netip.MustParseAddr("203.0.113.10")},
		KubeProxy: kubeProxy,
	}
}

func lines(objs []Object) []string {
	out := make([]string, len(objs))
	for i, o := range objs {
		out[i] = o.String()
	}
	return out
}

func expectLines(t *testing.T, what string, got, want []string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Errorf("%s:\n got: %s\nwant: %s", what, strings.Join(got, "\n      "), strings.Join(want, "\n      "))
	}
}

// takeWrites returns the write calls the fakes logged since the last call (listings are
// not writes).
func (n *node) takeWrites() []string {
	var w []string
	for _, op := range append(append(n.vs.TakeOps(), n.links.TakeOps()...), n.sets.TakeOps()...) {
		if f := strings.Fields(op); !slices.Contains([]string{"list", "list-headers", "list-services", "get-spec", "get-reals", "link", "addr-list", "route-list"}, f[0]) {
			w = append(w, op)
		}
	}
	for _, op := range n.tools.TakeOps() {
		if strings.Contains(op, "-restore") {
			w = append(w, op)
		}
	}
	return w
}

var wantKubeIPVS = []string{
	`rule ip6tables-legacy mangle -A PREROUTING -m comment --comment "kube-ipvs: firewall" -j KIPVS-FIREWALL (kube-ipvs)`,
	`chain ip6tables-legacy mangle KIPVS-FIREWALL (kube-ipvs)`,
	`rule iptables-nft nat -A PREROUTING -m comment --comment "kube-ipvs: services" -j KIPVS-SERVICES (kube-ipvs)`,
	`rule iptables-nft nat -A POSTROUTING -m comment --comment "kube-ipvs: masquerade" -j KIPVS-POSTROUTING (kube-ipvs)`,
	`chain iptables-nft nat KIPVS-POSTROUTING (kube-ipvs)`,
	`chain iptables-nft nat KIPVS-SERVICES (kube-ipvs)`,
	`chain iptables-nft nat KIPVS-SVC-4Q2BZ6ZJ7DO2VVZ6 (kube-ipvs)`,
	`ipset KIPVS-CLUSTER-IP (kube-ipvs)`,
	`ipset KIPVS-CLUSTER-IP-6 (kube-ipvs)`,
	`ipset KIPVS-HEALTH-CHECK-NODE-PORT (kube-ipvs)`,
	`virtual-server FWM 0x75802001 IPv6 (kube-ipvs)`,
	`virtual-server TCP 10.96.0.10:80 (kube-ipvs)`,
	`virtual-server TCP 203.0.113.10:30080 (kube-ipvs)`,
	`virtual-server UDP [fd00::10]:53 (kube-ipvs)`,
	`address 10.96.0.10/32 on kube-ipvs0 (kube-ipvs)`,
	`address 10.96.0.99/32 on kube-ipvs0 (kube-ipvs)`,
	`address fd00::10/128 on kube-ipvs0 (kube-ipvs)`,
	`link kube-ipvs0 (kube-ipvs)`,
}

// The plan holds exactly kube-ipvs' objects, making it writes nothing (a dry run), and
// running it removes them and nothing else.
func TestCleanupRemovesKubeIPVSObjectsOnly(t *testing.T) {
	n := newNode(t)
	p, err := Make(testConfig(false), n.kernel())
	if err != nil {
		t.Fatal(err)
	}
	expectLines(t, "plan", lines(p.Objects), wantKubeIPVS)
	if w := n.takeWrites(); len(w) != 0 {
		t.Fatalf("making the plan wrote: %q", w)
	}
	if failed := Failed(p.Run()); len(failed) != 0 {
		t.Fatalf("failed: %v", failed)
	}
	wantVS := "FWM 0x1 IPv4 rr\nTCP 10.96.0.99:80 rr\nTCP 192.0.2.50:8080 rr\nTCP 198.51.100.7:30080 rr\nTCP 203.0.113.10:8080 rr\n"
	if got := n.vs.Dump(); got != wantVS {
		t.Errorf("virtual servers left:\n%s\nwant:\n%s", got, wantVS)
	}
	if n.links.LinkType("kube-ipvs0") != "" {
		t.Error("kube-ipvs0 is still there")
	}
	if got := n.links.Addrs("foreign0"); !slices.Equal(got, []string{"192.0.2.50/32"}) {
		t.Errorf("foreign0's addresses: %q", got)
	}
	wantSets := []firewall.SetName{"FOREIGN-SET", "KUBE-6-LOAD-BALANCER-SOURCE-CID", "KUBE-CLUSTER-IP", "KUBE-SRC-ROUTERPOLICY"}
	if got := n.sets.Names(); !slices.Equal(got, wantSets) {
		t.Errorf("sets left: %q", got)
	}
	v4 := n.tools.Save("iptables-nft")
	if strings.Contains(v4, "KIPVS-") || strings.Contains(n.tools.Save("ip6tables-legacy"), "KIPVS-") {
		t.Errorf("KIPVS- rules left:\n%s", v4)
	}
	for _, keep := range []string{"-A PREROUTING -j FOREIGN-NAT", "-A FOREIGN-NAT -d 192.0.2.50/32 -j ACCEPT", "KUBE-SERVICES", "-A INPUT -j KUBE-ROUTER-INPUT"} {
		if !strings.Contains(v4, keep) {
			t.Errorf("%q is gone:\n%s", keep, v4)
		}
	}
	again, err := Make(testConfig(false), n.kernel())
	if err != nil || len(again.Objects) != 0 {
		t.Errorf("a second plan is not empty: %v %v", err, lines(again.Objects))
	}
}

// --kube-proxy takes kube-proxy's chains, jumps and sets, by name: not kube-ipvs' state,
// not the virtual servers or kube-ipvs0 (adopted), not kubelet's or kube-router's KUBE-*.
func TestCleanupKubeProxyRemovesItsLeftoversOnly(t *testing.T) {
	n := newNode(t)
	p, err := Make(testConfig(true), n.kernel())
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`rule iptables-nft nat -A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES (kube-proxy)`,
		`chain iptables-nft nat KUBE-MARK-MASQ (kube-proxy)`,
		`chain iptables-nft nat KUBE-SERVICES (kube-proxy)`,
		`chain iptables-nft nat KUBE-SVC-XPGD46QRK7WJZT7O (kube-proxy)`,
		`rule iptables-nft filter -A INPUT -m comment --comment "kubernetes ipvs access filter" -j KUBE-IPVS-FILTER (kube-proxy)`,
		`chain iptables-nft filter KUBE-IPVS-FILTER (kube-proxy)`,
		`ipset KUBE-6-LOAD-BALANCER-SOURCE-CID (kube-proxy)`,
		`ipset KUBE-CLUSTER-IP (kube-proxy)`,
	}
	expectLines(t, "plan", lines(p.Objects), want)
	if w := n.takeWrites(); len(w) != 0 {
		t.Fatalf("making the plan wrote: %q", w)
	}
	if failed := Failed(p.Run()); len(failed) != 0 {
		t.Fatalf("failed: %v", failed)
	}
	if got := strings.Count(n.vs.Dump(), "\n"); got != 9 {
		t.Errorf("virtual servers changed:\n%s", n.vs.Dump())
	}
	if got := n.links.Addrs("kube-ipvs0"); len(got) != 3 {
		t.Errorf("kube-ipvs0 changed: %q", got)
	}
	v4 := n.tools.Save("iptables-nft")
	for _, keep := range []string{"KIPVS-SERVICES", "-A INPUT -j KUBE-FIREWALL", "KUBE-KUBELET-CANARY", "KUBE-SVC-NOTAHASH", "-A INPUT -j KUBE-ROUTER-INPUT"} {
		if !strings.Contains(v4, keep) {
			t.Errorf("%q is gone:\n%s", keep, v4)
		}
	}
	if strings.Contains(v4, "KUBE-SERVICES") || strings.Contains(v4, "KUBE-IPVS-FILTER") {
		t.Errorf("kube-proxy's chains left:\n%s", v4)
	}
	if got := len(n.sets.Names()); got != 5 {
		t.Errorf("sets left: %q", n.sets.Names())
	}
}

// A removal the kernel refuses is reported on its objects; everything else is still
// removed. An object that went away meanwhile counts as removed.
func TestCleanupReportsWhatCouldNotBeRemoved(t *testing.T) {
	shortSetReleaseWait(t)
	n := newNode(t)
	n.sets.SetReferences("KIPVS-CLUSTER-IP-6", 1) // a foreign rule uses it
	p, err := Make(testConfig(false), n.kernel())
	if err != nil {
		t.Fatal(err)
	}
	n.vs.Drop(vsKey("10.96.0.10:80", model.TCP))
	n.tools.Fail = func(name string) error {
		if name == "ip6tables-legacy-restore" {
			return errors.New("line 2 failed")
		}
		return nil
	}
	var failed []string
	for _, o := range Failed(p.Run()) {
		failed = append(failed, o.Kind+" "+o.Name+": "+o.Error)
	}
	want := []string{
		`rule -m comment --comment "kube-ipvs: firewall" -j KIPVS-FIREWALL: line 2 failed (input line 2: -D PREROUTING -m comment --comment "kube-ipvs: firewall" -j KIPVS-FIREWALL)`,
		`chain KIPVS-FIREWALL: line 2 failed (input line 2: -D PREROUTING -m comment --comment "kube-ipvs: firewall" -j KIPVS-FIREWALL)`,
		`ipset KIPVS-CLUSTER-IP-6: destroy KIPVS-CLUSTER-IP-6: set is referenced by iptables rules`,
	}
	expectLines(t, "failed", failed, want)
	if n.links.LinkType("kube-ipvs0") != "" || n.sets.Names()[0] != "FOREIGN-SET" {
		t.Error("the objects after the failures were not removed")
	}
}

// shortSetReleaseWait makes a set that stays referenced fail at once.
func shortSetReleaseWait(t *testing.T) {
	old := setReleaseWait
	setReleaseWait = 30 * time.Millisecond
	t.Cleanup(func() { setReleaseWait = old })
}

// A set whose reference the kernel drops only after the rules' removal has returned (as
// nf_tables' deferred release does) is destroyed once it is free, not reported as failed.
func TestCleanupWaitsForTheKernelToReleaseASet(t *testing.T) {
	n := newNode(t)
	n.sets.SetReferences("KIPVS-CLUSTER-IP", 1)
	p, err := Make(testConfig(false), n.kernel())
	if err != nil {
		t.Fatal(err)
	}
	busy := 0
	n.sets.Fail = func(op string, name firewall.SetName) error {
		if op == "destroy" && name == "KIPVS-CLUSTER-IP" {
			if busy++; busy == 3 {
				go n.sets.SetReferences(name, 0) // the deferred release; Fail must not call the fake
			}
		}
		return nil
	}
	if failed := Failed(p.Run()); len(failed) != 0 {
		t.Fatalf("failed: %+v", failed)
	}
	if _, _, ok := n.sets.Get("KIPVS-CLUSTER-IP"); ok || busy < 3 {
		t.Errorf("KIPVS-CLUSTER-IP still there (%v) or destroyed without a retry (%d destroy calls)", ok, busy)
	}
}

// A listing that fails stops the cleanup before anything is written.
func TestCleanupDoesNotPlanFromAFailedListing(t *testing.T) {
	n := newNode(t)
	n.vs.Fail = func(op string, _ model.VSKey) error {
		if op == "list-services" {
			return errors.New("netlink: boom")
		}
		return nil
	}
	if _, err := Make(testConfig(false), n.kernel()); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("Make: %v", err)
	}
	if w := n.takeWrites(); len(w) != 0 {
		t.Errorf("wrote: %q", w)
	}
}

// A link of the dummy's name that is not a dummy is not ours: it stays, and its addresses
// do not make virtual servers ours. Missing kernel parts and tools are noted, not errors.
func TestCleanupLeavesANonDummyLinkAndNotesWhatIsMissing(t *testing.T) {
	n := newNode(t)
	n.links.DeleteLink("kube-ipvs0")
	n.links.PutLink("kube-ipvs0", "veth")
	n.links.PutAddr("kube-ipvs0", netip.MustParsePrefix("10.96.0.10/32"), 0)
	n.tools.Uninstall("iptables-legacy-save", "ip6tables-legacy-save")
	k := n.kernel()
	k.Sets = nil
	p, err := Make(testConfig(false), k)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range p.Objects {
		if o.Kind == KindLink || o.Kind == KindAddress || o.Name == "TCP 10.96.0.10:80" {
			t.Errorf("plans to remove %s", o)
		}
	}
	wantNotes := []string{
		"iptables-legacy tools are not installed: not looked at",
		"ip6tables-legacy tools are not installed: not looked at",
		"ipset: not available in this kernel, no sets to remove",
		"kube-ipvs0 is a veth link, not a dummy: left alone, with its addresses",
	}
	expectLines(t, "notes", p.Notes, wantNotes)
}

func TestKubeProxyNames(t *testing.T) {
	for name, want := range map[string]bool{
		"KUBE-SERVICES": true, "KUBE-IPVS-OUT-FILTER": true, "KUBE-PROXY-CANARY": true, "KUBE-NODEPORTS": true,
		"KUBE-SEP-ABCDEFGH23456772": true, "KUBE-FW-ABCDEFGH23456772": true,
		"KUBE-SEP-ABCDEFGH2345677": false, "KUBE-SEP-abcdefgh23456772": false, "KUBE-SEP-ABCDEFGH23456781": false,
		"KUBE-FIREWALL": false, "KUBE-KUBELET-CANARY": false, "KUBE-MARK-DROP": false, "KUBE-ROUTER-INPUT": false,
	} {
		if got := IsKubeProxyChain(name); got != want {
			t.Errorf("IsKubeProxyChain(%s) = %v", name, got)
		}
	}
	for name, want := range map[string]bool{
		"KUBE-CLUSTER-IP": true, "KUBE-6-CLUSTER-IP": true, "KUBE-6-NODE-PORT-LOCAL-SCTP-HAS": true,
		"KUBE-6-LOAD-BALANCER-SOURCE-CID": true, "KUBE-IPVS-IPS": true,
		"KUBE-SRC-ABC": false, "KUBE-DST-ABC": false, "KIPVS-CLUSTER-IP": false,
	} {
		if got := IsKubeProxySet(name); got != want {
			t.Errorf("IsKubeProxySet(%s) = %v", name, got)
		}
	}
	for name := range kubeProxySets {
		if len(name) > maxSetName {
			t.Errorf("%s is longer than the kernel takes", name)
		}
	}
}

// With --vip-binding=route the VIPs are the proxy's local routes through kube-ipvs0: the
// virtual servers on them are the proxy's, and the routes are listed and go with the link.
func TestCleanupRemovesRouteBoundVIPs(t *testing.T) {
	n := newNode(t)
	n.vs.Put(&model.VirtualServer{Key: vsKey("10.96.1.1:80", model.TCP), Spec: model.VSSpec{Scheduler: "rr"}})
	n.links.PutRoute("kube-ipvs0", netip.MustParsePrefix("10.96.1.1/32"))
	n.links.PutRoute("kube-ipvs0", netip.MustParsePrefix("fd00::11/128"))
	p, err := Make(testConfig(false), n.kernel())
	if err != nil {
		t.Fatal(err)
	}
	got := lines(p.Objects)
	for _, want := range []string{"virtual-server TCP 10.96.1.1:80 (kube-ipvs)",
		"local-route 10.96.1.1/32 on kube-ipvs0 (kube-ipvs)", "local-route fd00::11/128 on kube-ipvs0 (kube-ipvs)"} {
		if !slices.Contains(got, want) {
			t.Errorf("plan lacks %q:\n%s", want, strings.Join(got, "\n"))
		}
	}
	if failed := Failed(p.Run()); len(failed) != 0 {
		t.Fatalf("failed: %v", failed)
	}
	if n.links.Routes("kube-ipvs0") != nil || strings.Contains(n.vs.Dump(), "10.96.1.1:80") {
		t.Errorf("left behind: routes %v, virtual servers\n%s", n.links.Routes("kube-ipvs0"), n.vs.Dump())
	}
}

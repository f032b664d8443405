package iptproxy

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/kube-ipvs/kube-ipvs/iptables"
	"github.com/kube-ipvs/kube-ipvs/model"
	"github.com/kube-ipvs/kube-ipvs/test/golden"
)

var (
	nodeV4      = netip.MustParseAddr("192.168.1.10")
	nodeV6      = netip.MustParseAddr("2001:db8::10")
	testNodeIPs = []netip.Addr{nodeV4, nodeV6}
	testCfg     = Config{ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("fd00:244::/64")}}
)

// newSynced returns a Proxy on a fake whose first Resync (no Services) is done, and the
// fake with its log cleared.
func newSynced(t *testing.T, cfg Config) (*Proxy, *iptables.FakeExec) {
	t.Helper()
	fx := iptables.NewFakeExec()
	if cfg.Tools.Backend == iptables.Auto {
		cfg.Tools.Backend = iptables.NFT
	}
	p, err := New(fx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	p.SetNodeIPs(testNodeIPs)
	if r := p.Resync(); r.Err != nil || r.Restores != len(cfg.families()) {
		t.Fatalf("first Resync: %+v, want one restore per family", r)
	}
	fx.TakeOps()
	return p, fx
}

// stage builds st from svc and its endpoints, as the controller would, and stages it.
func stage(p *Proxy, svc *corev1.Service, eps ...ep) {
	var v4s, v6s []ep
	for _, e := range eps {
		if netip.MustParseAddr(e.ip).Is4() {
			v4s = append(v4s, e)
		} else {
			v6s = append(v6s, e)
		}
	}
	port := svc.Spec.Ports[0].TargetPort.IntVal
	st := build(svc, testNodeIPs, makeSlice(svc, port, v4s...), makeSlice(svc, port, v6s...))
	p.Stage(nameOf(svc), st)
}

// converged checks that what incremental writes left in the fake is exactly the desired
// state: a Resync finds nothing to repair.
func converged(t *testing.T, p *Proxy, fx *iptables.FakeExec) {
	t.Helper()
	fx.TakeOps()
	r := p.Resync()
	if r.Err != nil || r.Restores != 0 {
		t.Errorf("Resync after incremental writes: %+v, want no restore; it wrote:\n%s", r, strings.Join(fx.TakeOps(), "\n"))
	}
	fx.TakeOps()
}

func ops(fx *iptables.FakeExec) string { return strings.Join(fx.TakeOps(), "\n") + "\n" }

// The fixed chains and jumps, as the first Resync writes them.
func TestGoldenStaticChains(t *testing.T) {
	for _, tc := range []struct {
		name         string
		cfg          Config
		serviceCIDRs []netip.Prefix
	}{
		{"static-cluster-cidr", testCfg, nil},
		{"static-masquerade-all", Config{MasqueradeAll: true, ClusterCIDRs: testCfg.ClusterCIDRs}, nil},
		{"static-two-cidrs-ipv4-only", Config{IPv4: true, ClusterCIDRs: []netip.Prefix{
			netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("10.245.0.0/16")}}, nil},
		{"static-service-cidrs", testCfg, []netip.Prefix{netip.MustParsePrefix("10.96.0.0/16"),
			netip.MustParsePrefix("10.97.0.0/24"), netip.MustParsePrefix("fd00:96::/108"), netip.MustParsePrefix("0.0.0.0/0")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fx := iptables.NewFakeExec()
			tc.cfg.Tools.Backend = iptables.NFT
			p, err := New(fx, tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			p.SetServiceCIDRs(tc.serviceCIDRs)
			if r := p.Resync(); r.Err != nil {
				t.Fatal(r.Err)
			}
			golden.Check(t, tc.name+".ops", ops(fx))
		})
	}
}

// Each kind of Service: the restore input that adds it to a synced node.
func TestGoldenServiceKinds(t *testing.T) {
	local, remote := true, false
	for _, tc := range []struct {
		name string
		svc  svcOpts
		eps  []ep
	}{
		{"clusterip", svcOpts{clusterIPs: []string{"10.96.0.10"}, port: 80},
			[]ep{{"10.244.1.11", local}, {"10.244.2.12", remote}, {"10.244.2.13", remote}}},
		{"clusterip-affinity", svcOpts{clusterIPs: []string{"10.96.0.10"}, port: 80, affinity: 600},
			[]ep{{"10.244.1.11", local}, {"10.244.2.12", remote}}},
		{"clusterip-udp-no-endpoints", svcOpts{clusterIPs: []string{"10.96.0.53"}, proto: corev1.ProtocolUDP, port: 53}, nil},
		{"nodeport", svcOpts{clusterIPs: []string{"10.96.0.10"}, typ: corev1.ServiceTypeNodePort, port: 80, nodePort: 30080},
			[]ep{{"10.244.1.11", local}, {"10.244.2.12", remote}}},
		{"nodeport-no-endpoints", svcOpts{clusterIPs: []string{"10.96.0.10"}, typ: corev1.ServiceTypeNodePort, port: 80, nodePort: 30080}, nil},
		{"externalip", svcOpts{clusterIPs: []string{"10.96.0.10"}, port: 80, externalIPs: []string{"198.51.100.11"}},
			[]ep{{"10.244.2.12", remote}}},
		{"loadbalancer-source-ranges", svcOpts{clusterIPs: []string{"10.96.0.10"}, typ: corev1.ServiceTypeLoadBalancer, port: 443, nodePort: 30443,
			lbIPs: []string{"203.0.113.10"}, ranges: []string{"198.51.100.0/24", "192.168.1.0/24"}},
			[]ep{{"10.244.1.11", local}, {"10.244.2.12", remote}}},
		{"loadbalancer-local", svcOpts{clusterIPs: []string{"10.96.0.10"}, typ: corev1.ServiceTypeLoadBalancer, port: 80, nodePort: 30080,
			lbIPs: []string{"203.0.113.10"}, local: true, healthPort: 32000},
			[]ep{{"10.244.1.11", local}, {"10.244.2.12", remote}}},
		{"nodeport-local-without-local-endpoints", svcOpts{clusterIPs: []string{"10.96.0.10"}, typ: corev1.ServiceTypeNodePort, port: 80, nodePort: 30080, local: true},
			[]ep{{"10.244.2.12", remote}}},
		{"nodeport-internal-local", svcOpts{clusterIPs: []string{"10.96.0.10"}, typ: corev1.ServiceTypeNodePort, port: 80, nodePort: 30080, itpLocal: true},
			[]ep{{"10.244.1.11", local}, {"10.244.2.12", remote}}},
		// kube-proxy drops, and says which case it is: endpoints exist, none here.
		{"clusterip-internal-local-without-local-endpoints", svcOpts{clusterIPs: []string{"10.96.0.10"}, port: 80, itpLocal: true},
			[]ep{{"10.244.2.12", remote}}},
		{"sctp", svcOpts{clusterIPs: []string{"10.96.0.10"}, proto: corev1.ProtocolSCTP, port: 9999, targetPort: 9999},
			[]ep{{"10.244.2.12", remote}}},
		{"dual-stack-nodeport", svcOpts{clusterIPs: []string{"10.96.0.10", "fd00:96::10"}, typ: corev1.ServiceTypeNodePort, port: 80, nodePort: 30080},
			[]ep{{"10.244.1.11", local}, {"fd00:244::11", local}, {"fd00:244::12", remote}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, fx := newSynced(t, testCfg)
			tc.svc.name = "web"
			stage(p, makeService(tc.svc), tc.eps...)
			r := p.Open()
			if r.Err != nil {
				t.Fatal(r.Err)
			}
			golden.Check(t, tc.name+".ops", ops(fx))
			converged(t, p, fx)
		})
	}
}

// probabilityRE finds the statistic rules' probabilities in restore input.
var probabilityRE = regexp.MustCompile(`--probability (\S+)`)

func TestProbabilitiesThreeEndpoints(t *testing.T) {
	p, fx := newSynced(t, testCfg)
	svc := makeService(svcOpts{name: "web", clusterIPs: []string{"10.96.0.10"}, port: 80})
	stage(p, svc, ep{"10.244.2.1", false}, ep{"10.244.2.2", false}, ep{"10.244.2.3", false})
	if r := p.Open(); r.Err != nil || r.Restores != 1 || r.Entries != 3 {
		t.Fatalf("Open: %+v, want 1 restore and 3 endpoint chains", r)
	}
	var balance []string
	for _, l := range fx.TakeOps() {
		if strings.HasPrefix(l, "  -A KIPVS-SVC-") && strings.Contains(l, " -> ") {
			balance = append(balance, l)
		}
	}
	if len(balance) != 3 {
		t.Fatalf("want 3 balancing rules, got:\n%s", strings.Join(balance, "\n"))
	}
	for i, want := range []string{"0.33333", "0.50000", ""} {
		m := probabilityRE.FindStringSubmatch(balance[i])
		switch {
		case want == "" && m != nil:
			t.Errorf("rule %d must be unconditional: %s", i, balance[i])
		case want != "" && (m == nil || !strings.HasPrefix(m[1], want)):
			t.Errorf("rule %d: want probability %s..., got %s", i, want, balance[i])
		}
		if want := fmt.Sprintf("10.244.2.%d:8080", i+1); !strings.Contains(balance[i], want) {
			t.Errorf("rule %d does not lead to %s: %s", i, want, balance[i])
		}
	}
}

// For any n, the chained probabilities give every endpoint 1/n.
func TestProbabilitiesAreUniform(t *testing.T) {
	for _, n := range []int{1, 2, 3, 7, 100, 1000} {
		rest := 1.0
		for i := 0; i < n; i++ {
			p := 1.0
			if i < n-1 {
				v, err := strconv.ParseFloat(probability(n-i), 64)
				if err != nil {
					t.Fatal(err)
				}
				p = v
			}
			share := rest * p
			rest -= share
			if math.Abs(share-1/float64(n)) > 1e-6 {
				t.Errorf("n=%d: endpoint %d gets %.9f, want %.9f", n, i, share, 1/float64(n))
			}
		}
	}
	if got := probability(3); got != "0.33333333349" {
		t.Errorf("probability(3) = %s, want what iptables-save prints (0.33333333349)", got)
	}
}

func TestAffinityRules(t *testing.T) {
	p, fx := newSynced(t, testCfg)
	svc := makeService(svcOpts{name: "sticky", clusterIPs: []string{"10.96.0.20"}, port: 80, affinity: 600})
	stage(p, svc, ep{"10.244.2.1", false}, ep{"10.244.2.2", false})
	if r := p.Open(); r.Err != nil {
		t.Fatal(r.Err)
	}
	in := ops(fx)
	sep1 := chainName(prefixSEP, "ns/sticky:p/TCP 10.244.2.1:8080")
	sep2 := chainName(prefixSEP, "ns/sticky:p/TCP 10.244.2.2:8080")
	svcChain := chainName(prefixSVC, "ns/sticky:p/TCP")
	var svcRules []string
	for _, l := range strings.Split(in, "\n") {
		if strings.HasPrefix(l, "  -A "+svcChain+" ") {
			svcRules = append(svcRules, l)
		}
	}
	// Masquerade decision, two affinity checks first, then the random choice.
	if len(svcRules) != 5 {
		t.Fatalf("want 5 rules in %s, got:\n%s", svcChain, strings.Join(svcRules, "\n"))
	}
	for i, sep := range []string{sep1, sep2} {
		want := "-m recent --rcheck --seconds 600 --reap --name " + sep + " --mask 255.255.255.255 --rsource -j " + sep
		if !strings.Contains(svcRules[1+i], want) {
			t.Errorf("affinity rule %d: want %q in\n%s", i, want, svcRules[1+i])
		}
		set := "-A " + sep + " -p tcp -m comment --comment \"ns/sticky:p\" -m recent --set --name " + sep +
			" --mask 255.255.255.255 --rsource -j DNAT --to-destination 10.244.2." + strconv.Itoa(i+1) + ":8080"
		if !strings.Contains(in, set) {
			t.Errorf("endpoint chain %s must remember the client before DNAT: want %q in\n%s", sep, set, in)
		}
	}
	if !strings.Contains(svcRules[3], "--probability 0.5") || strings.Contains(svcRules[4], "--probability") {
		t.Errorf("random choice after the affinity rules:\n%s", strings.Join(svcRules[3:], "\n"))
	}

	// Changing only the timeout rewrites the balancing and endpoint chains.
	svc2 := makeService(svcOpts{name: "sticky", clusterIPs: []string{"10.96.0.20"}, port: 80, affinity: 30})
	stage(p, svc2, ep{"10.244.2.1", false}, ep{"10.244.2.2", false})
	if r := p.Open(); r.Err != nil || r.Restores != 1 {
		t.Fatalf("Open: %+v", r)
	}
	if in := ops(fx); !strings.Contains(in, "--seconds 30 --reap") || strings.Contains(in, "--seconds 600") {
		t.Errorf("new timeout not written:\n%s", in)
	}
	converged(t, p, fx)
}

func TestNoEndpointsRejectThenEndpointsArrive(t *testing.T) {
	p, fx := newSynced(t, testCfg)
	tcp := makeService(svcOpts{name: "tcp", clusterIPs: []string{"10.96.0.30"}, typ: corev1.ServiceTypeNodePort, port: 80, nodePort: 30080})
	udp := makeService(svcOpts{name: "udp", clusterIPs: []string{"fd00:96::31"}, proto: corev1.ProtocolUDP, port: 53})
	stage(p, tcp)
	stage(p, udp)
	r := p.Open()
	if r.Err != nil || r.Restores != 2 || r.Entries != 0 {
		t.Fatalf("Open: %+v, want 2 restores (both families), no endpoint chains", r)
	}
	in := ops(fx)
	for _, want := range []string{
		`-A KIPVS-SERVICES -d 10.96.0.30/32 -p tcp -m tcp --dport 80 -m comment --comment "ns/tcp:p has no endpoints" -j REJECT --reject-with tcp-reset`,
		`-A KIPVS-SERVICES -d 192.168.1.10/32 -p tcp -m tcp --dport 30080 -m comment --comment "ns/tcp:p NodePort has no endpoints" -j REJECT --reject-with tcp-reset`,
		`-A KIPVS-SERVICES -d fd00:96::31/128 -p udp -m udp --dport 53 -m comment --comment "ns/udp:p has no endpoints" -j REJECT --reject-with icmp6-port-unreachable`,
	} {
		if !strings.Contains(in, "  "+want+"\n") {
			t.Errorf("missing %q in\n%s", want, in)
		}
	}
	if strings.Contains(in, "*nat") || strings.Contains(in, ":KIPVS-") {
		t.Errorf("a Service without endpoints needs no nat rules and no chains:\n%s", in)
	}

	// Endpoints arrive: the rejects go, the dispatch rules and chains come.
	stage(p, tcp, ep{"10.244.2.1", false})
	if r := p.Open(); r.Err != nil || r.Restores != 1 || r.Entries != 1 {
		t.Fatalf("Open: %+v", r)
	}
	in = ops(fx)
	for _, want := range []string{
		`-D KIPVS-SERVICES -d 10.96.0.30/32 -p tcp -m tcp --dport 80 -m comment --comment "ns/tcp:p has no endpoints" -j REJECT --reject-with tcp-reset`,
		`-I KIPVS-SERVICES 1 -d 10.96.0.30/32 -p tcp -m tcp --dport 80 -m comment --comment "ns/tcp:p cluster IP" -j KIPVS-SVC-`,
		`-A KIPVS-NODEPORTS -d 192.168.1.10/32 -p tcp -m tcp --dport 30080 -m comment --comment "ns/tcp:p NodePort" -j KIPVS-EXT-`,
	} {
		if !strings.Contains(in, want) {
			t.Errorf("missing %q in\n%s", want, in)
		}
	}
	if strings.Contains(in, "ns/udp") || strings.Contains(in, "ip6tables") {
		t.Errorf("the UDP Service did not change but was written:\n%s", in)
	}
	converged(t, p, fx)
}

// chainsOf lists the chain names a Service's rules use, for telling its lines apart.
func chainsOf(t *testing.T, p *Proxy, name model.ServiceName) []string {
	t.Helper()
	var out []string
	for _, fs := range p.fams {
		if r := fs.applied[name]; r != nil {
			for _, c := range r.chains {
				out = append(out, c.name)
			}
		}
	}
	return out
}

func TestEndpointChangeWritesOnlyThatService(t *testing.T) {
	p, fx := newSynced(t, testCfg)
	a := makeService(svcOpts{name: "a", clusterIPs: []string{"10.96.0.1", "fd00:96::1"}, typ: corev1.ServiceTypeNodePort, port: 80, nodePort: 30001})
	b := makeService(svcOpts{name: "b", clusterIPs: []string{"10.96.0.2", "fd00:96::2"}, typ: corev1.ServiceTypeLoadBalancer, port: 80, nodePort: 30002,
		lbIPs: []string{"203.0.113.2"}, ranges: []string{"198.51.100.0/24"}, affinity: 60})
	stage(p, a, ep{"10.244.2.1", false}, ep{"10.244.2.2", false}, ep{"fd00:244::1", false})
	stage(p, b, ep{"10.244.2.3", false}, ep{"10.244.2.4", false})
	if r := p.Open(); r.Err != nil || r.Restores != 2 {
		t.Fatalf("Open: %+v", r)
	}
	fx.TakeOps()
	before := fx.Save("iptables-nft")

	// One IPv4 endpoint of a changes.
	stage(p, a, ep{"10.244.2.1", false}, ep{"10.244.2.9", false}, ep{"fd00:244::1", false})
	r := p.Open()
	if r.Err != nil || r.Restores != 1 {
		t.Fatalf("Open: %+v, want exactly 1 restore (IPv4 only)", r)
	}
	lines := fx.TakeOps()
	if lines[0] != "iptables-nft-restore -w 5 --noflush" {
		t.Fatalf("want one IPv4 restore and nothing else, got:\n%s", strings.Join(lines, "\n"))
	}
	aChains := chainsOf(t, p, nameOf(a))
	for _, l := range lines[1:] {
		l = strings.TrimSpace(l)
		if l == "*nat" || l == "*filter" || l == "COMMIT" {
			continue
		}
		if strings.Contains(l, "ns/b") || strings.Contains(l, "10.244.2.3") || strings.Contains(l, "10.244.2.4") {
			t.Errorf("line of another Service: %s", l)
		}
		mine := strings.Contains(l, "ns/a:") || strings.Contains(l, "10.244.2.2:") // the gone endpoint's chain
		for _, c := range aChains {
			mine = mine || strings.Contains(l, c)
		}
		if !mine && !strings.HasPrefix(l, "-F KIPVS-SEP-") && !strings.HasPrefix(l, "-X KIPVS-SEP-") {
			t.Errorf("line that is not a's: %s", l)
		}
		if strings.HasPrefix(l, ":KIPVS-SERVICES") || strings.HasPrefix(l, ":KIPVS-NODEPORTS") || strings.HasPrefix(l, "-F KIPVS-SERVICES") {
			t.Errorf("a dispatch chain was flushed: %s", l)
		}
	}
	// Only the endpoint chains and the balancing chain changed: the dispatch rules of a
	// are where they were (no -D/-I for them).
	for _, l := range lines {
		if strings.Contains(l, "-D KIPVS-") || strings.Contains(l, "-I KIPVS-") || strings.Contains(l, "-A KIPVS-NODEPORTS") {
			t.Errorf("an endpoint change must not touch dispatch rules: %s", l)
		}
	}
	after := fx.Save("iptables-nft")
	if !strings.Contains(after, "10.244.2.9:8080") || strings.Contains(after, "10.244.2.2:8080") {
		t.Errorf("endpoint not replaced:\n%s", after)
	}
	for _, l := range strings.Split(before, "\n") {
		if strings.Contains(l, "ns/b") && !strings.Contains(after, l) {
			t.Errorf("b's rule changed: %s", l)
		}
	}
	converged(t, p, fx)
}

func TestNoopOpenWritesNothing(t *testing.T) {
	p, fx := newSynced(t, testCfg)
	svc := makeService(svcOpts{name: "web", clusterIPs: []string{"10.96.0.10", "fd00:96::10"}, typ: corev1.ServiceTypeNodePort, port: 80, nodePort: 30080})
	stage(p, svc, ep{"10.244.2.1", false}, ep{"fd00:244::1", false})
	if r := p.Open(); r.Err != nil || r.Restores != 2 {
		t.Fatalf("Open: %+v", r)
	}
	fx.TakeOps()
	// Nothing staged.
	if r := p.Open(); r.Err != nil || r.Restores != 0 || r.Entries != 2 {
		t.Errorf("empty Open: %+v, want 0 restores and 2 entries", r)
	}
	// The same state staged again (a full sync stages every Service).
	stage(p, svc, ep{"10.244.2.1", false}, ep{"fd00:244::1", false})
	p.SetNodeIPs(testNodeIPs)
	if r := p.Open(); r.Err != nil || r.Restores != 0 || r.Entries != 2 {
		t.Errorf("Open of an unchanged Service: %+v, want 0 restores and 2 entries", r)
	}
	if got := fx.TakeOps(); len(got) != 0 {
		t.Errorf("no-op steps ran processes:\n%s", strings.Join(got, "\n"))
	}
}

func TestDeletionRemovesChainsAndDispatchRules(t *testing.T) {
	p, fx := newSynced(t, testCfg)
	keep := makeService(svcOpts{name: "keep", clusterIPs: []string{"10.96.0.1"}, port: 80})
	gone := makeService(svcOpts{name: "gone", clusterIPs: []string{"10.96.0.2", "fd00:96::2"}, typ: corev1.ServiceTypeLoadBalancer, port: 80, nodePort: 30002,
		lbIPs: []string{"203.0.113.2"}, ranges: []string{"198.51.100.0/24"}, affinity: 60, local: true, healthPort: 32002})
	stage(p, keep, ep{"10.244.2.1", false})
	stage(p, gone, ep{"10.244.1.3", true}, ep{"10.244.2.4", false}, ep{"fd00:244::3", true})
	if r := p.Open(); r.Err != nil {
		t.Fatal(r.Err)
	}
	goneChains := chainsOf(t, p, nameOf(gone))
	if len(goneChains) < 5 {
		t.Fatalf("expected several chains for the Service, got %v", goneChains)
	}
	fx.TakeOps()
	p.Stage(nameOf(gone), nil)
	r := p.Open()
	if r.Err != nil || r.Restores != 2 || r.Entries != 1 {
		t.Fatalf("Open: %+v, want 2 restores and 1 entry left", r)
	}
	in := ops(fx)
	if strings.Contains(in, "ns/keep") || strings.Contains(in, ":KIPVS-") {
		t.Errorf("deleting a Service declared or touched other chains:\n%s", in)
	}
	for _, c := range goneChains {
		if !strings.Contains(in, "-X "+c+"\n") {
			t.Errorf("chain %s not deleted:\n%s", c, in)
		}
	}
	for _, fam := range []string{"iptables-nft", "ip6tables-nft"} {
		s := fx.Save(fam)
		for _, c := range goneChains {
			if strings.Contains(s, c) {
				t.Errorf("%s still has %s:\n%s", fam, c, s)
			}
		}
		if strings.Contains(s, "ns/gone") {
			t.Errorf("%s still has rules of the deleted Service:\n%s", fam, s)
		}
	}
	if !strings.Contains(fx.Save("iptables-nft"), "ns/keep:p cluster IP") {
		t.Errorf("the other Service's rule is gone")
	}
	converged(t, p, fx)
}

func TestResyncRepairs(t *testing.T) {
	p, fx := newSynced(t, testCfg)
	svc := makeService(svcOpts{name: "web", clusterIPs: []string{"10.96.0.10"}, typ: corev1.ServiceTypeNodePort, port: 80, nodePort: 30080})
	stage(p, svc, ep{"10.244.2.1", false}, ep{"10.244.2.2", false})
	if r := p.Open(); r.Err != nil {
		t.Fatal(r.Err)
	}
	svcChain := chainName(prefixSVC, "ns/web:p/TCP")
	good := fx.Save("iptables-nft")
	for _, tc := range []struct {
		name, damage string
	}{
		{"flushed Service chain", "*nat\n-F " + svcChain + "\nCOMMIT\n"},
		{"flushed dispatch chain", "*nat\n-F KIPVS-SERVICES\nCOMMIT\n"},
		{"deleted jump", "*nat\n-D PREROUTING -m comment --comment \"kube-ipvs: Service dispatch\" -j KIPVS-SERVICES\nCOMMIT\n"},
		{"rule inserted before our jump", "*filter\n-I INPUT 1 -j DROP\nCOMMIT\n"},
		{"duplicate jump", "*filter\n-A FORWARD -m comment --comment \"kube-ipvs: source ranges, rejects, forwarded Service traffic\" -j KIPVS-FORWARD\nCOMMIT\n"},
		{"edited rule", "*nat\n-A " + svcChain + " -j RETURN\nCOMMIT\n"},
		{"stale chains of the IPVS mode", "*mangle\n:KIPVS-FIREWALL - [0:0]\n-A KIPVS-FIREWALL -j DROP\n-I PREROUTING 1 -j KIPVS-FIREWALL\nCOMMIT\n*nat\n:KIPVS-OUTPUT - [0:0]\n-A KIPVS-OUTPUT -j KIPVS-SERVICES\n-I OUTPUT 2 -j KIPVS-OUTPUT\nCOMMIT\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := fx.Load("iptables-nft", tc.damage); err != nil {
				t.Fatal(err)
			}
			fx.TakeOps()
			r := p.Resync()
			if r.Err != nil || r.Restores != 1 {
				t.Fatalf("Resync: %+v, want 1 restore", r)
			}
			got := fx.Save("iptables-nft")
			if tc.name == "rule inserted before our jump" {
				// Our jump is first again; the other rule stays.
				if !strings.Contains(got, "-A INPUT -m comment --comment \"kube-ipvs: source ranges, rejects, health-check node ports\" -j KIPVS-INPUT\n-A INPUT -j DROP\n") {
					t.Errorf("jump not first again:\n%s", got)
				}
				if err := fx.Load("iptables-nft", "*filter\n-D INPUT -j DROP\nCOMMIT\n"); err != nil {
					t.Fatal(err)
				}
				got = fx.Save("iptables-nft")
			}
			if tables(got) != tables(good) {
				t.Errorf("not repaired:\n--- got ---\n%s\n--- want ---\n%s", got, good)
			}
			converged(t, p, fx)
		})
	}
}

// tables keeps the nat and filter tables of a -save listing, without comment lines.
func tables(save string) string {
	var out []string
	keep := false
	for _, l := range strings.Split(save, "\n") {
		if strings.HasPrefix(l, "*") {
			keep = l == "*nat" || l == "*filter"
		}
		if keep && l != "" && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// A restarted proxy that desires what the kernel holds writes nothing.
func TestRestartAdoptsIntactRules(t *testing.T) {
	p, fx := newSynced(t, testCfg)
	svc := makeService(svcOpts{name: "web", clusterIPs: []string{"10.96.0.10", "fd00:96::10"}, typ: corev1.ServiceTypeLoadBalancer, port: 80, nodePort: 30080,
		lbIPs: []string{"203.0.113.10"}, ranges: []string{"198.51.100.0/24"}, affinity: 100})
	eps := []ep{{"10.244.2.1", false}, {"10.244.1.2", true}, {"fd00:244::1", true}}
	stage(p, svc, eps...)
	if r := p.Open(); r.Err != nil {
		t.Fatal(r.Err)
	}
	fx.TakeOps()
	cfg := testCfg
	cfg.Tools.Backend = iptables.NFT
	q, err := New(fx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	q.SetNodeIPs(testNodeIPs)
	stage(q, svc, eps...)
	if r := q.Resync(); r.Err != nil || r.Restores != 0 || r.Entries != 3 {
		t.Errorf("Resync of a restarted proxy: %+v, want no restore and 3 entries", r)
	}
	// It then works incrementally from the adopted state.
	stage(q, svc, eps[1:]...)
	if r := q.Open(); r.Err != nil || r.Restores != 1 {
		t.Errorf("Open: %+v", r)
	}
	converged(t, q, fx)
}

func TestFailedRestoreRebuildsNextTime(t *testing.T) {
	p, fx := newSynced(t, testCfg)
	svc := makeService(svcOpts{name: "web", clusterIPs: []string{"10.96.0.10"}, port: 80})
	fail := true
	fx.Fail = func(name string) error {
		if fail && strings.HasSuffix(name, "-restore") {
			return errors.New("line 3 failed: resource busy")
		}
		return nil
	}
	stage(p, svc, ep{"10.244.2.1", false})
	r := p.Open()
	if r.Err == nil || !strings.Contains(r.Err.Error(), "input line 3") {
		t.Fatalf("Open: %+v, want the error with its input line", r)
	}
	fail = false
	fx.TakeOps()
	// The next Open rebuilds the family from the desired state (a -save, a restore).
	r = p.Open()
	if r.Err != nil || r.Restores != 1 {
		t.Fatalf("Open after a failure: %+v, want one rebuilding restore", r)
	}
	if s := fx.Save("iptables-nft"); !strings.Contains(s, "10.244.2.1:8080") {
		t.Errorf("Service not written after the retry:\n%s", s)
	}
	converged(t, p, fx)
}

func TestBackendDetectionAndFamilies(t *testing.T) {
	fx := iptables.NewFakeExec()
	if err := fx.Load("iptables-legacy", "*filter\n-A INPUT -j ACCEPT\nCOMMIT\n"); err != nil {
		t.Fatal(err)
	}
	p, err := New(fx, Config{IPv4: true})
	if err != nil {
		t.Fatal(err)
	}
	if r := p.Resync(); r.Err != nil || r.Restores != 1 {
		t.Fatalf("Resync: %+v", r)
	}
	if b, _ := p.Backend(); b != iptables.Legacy {
		t.Errorf("backend %q, want legacy (the one with rules)", b)
	}
	for _, l := range fx.TakeOps() {
		if strings.HasPrefix(l, "ip6tables-") && strings.Contains(l, "restore") {
			t.Errorf("IPv6 written with IPv4 only: %s", l)
		}
	}
	if !strings.Contains(fx.Save("iptables-legacy"), "-A INPUT -j ACCEPT") {
		t.Errorf("a rule that is not ours was removed")
	}
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []Config{
		{MasqueradeMark: 0x6000},
		{ClusterCIDRs: []netip.Prefix{{}}},
		{Tools: iptables.Config{Backend: "bpf"}},
	} {
		if _, err := New(iptables.NewFakeExec(), c); err == nil {
			t.Errorf("New(%+v) accepted an invalid Config", c)
		}
	}
}

// Node addresses shape source ranges: the node may reach the LB from the LB IP when a
// range holds one of its addresses.
func TestNodeIPsShapeSourceRanges(t *testing.T) {
	p, fx := newSynced(t, testCfg)
	svc := makeService(svcOpts{name: "lb", clusterIPs: []string{"10.96.0.10"}, typ: corev1.ServiceTypeLoadBalancer, port: 80, nodePort: 30080,
		lbIPs: []string{"203.0.113.10"}, ranges: []string{"192.168.1.0/24"}})
	stage(p, svc, ep{"10.244.2.1", false})
	if r := p.Open(); r.Err != nil {
		t.Fatal(r.Err)
	}
	if !strings.Contains(ops(fx), "-s 203.0.113.10/32") {
		t.Fatalf("node in range: the LB IP must be admitted as a source")
	}
	p.SetNodeIPs([]netip.Addr{netip.MustParseAddr("192.168.2.10")})
	r := p.Open()
	if r.Err != nil || r.Restores != 1 {
		t.Fatalf("Open after the node IPs changed: %+v", r)
	}
	if in := ops(fx); strings.Contains(in, "-s 203.0.113.10/32") || !strings.Contains(in, ":KIPVS-FW-") {
		t.Errorf("the firewall chain was not rewritten without the LB IP:\n%s", in)
	}
}

// A Service CIDR added later reaches the kernel at the next Resync (the controller repairs
// when the CIDRs change), which then finds nothing more to do.
func TestServiceCIDRsChangeAtResync(t *testing.T) {
	fx := iptables.NewFakeExec()
	cfg := testCfg
	cfg.Tools.Backend = iptables.NFT
	p, err := New(fx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if r := p.Resync(); r.Err != nil {
		t.Fatal(r.Err)
	}
	fx.TakeOps()
	p.SetServiceCIDRs([]netip.Prefix{netip.MustParsePrefix("10.96.0.0/16")})
	r := p.Resync()
	if r.Err != nil || r.Restores != 1 {
		t.Fatalf("Resync after a new IPv4 Service CIDR: %+v, want one restore (IPv4 only)", r)
	}
	if got := ops(fx); !strings.Contains(got, "-A KIPVS-SERVICE-CIDRS -d 10.96.0.0/16 ") {
		t.Errorf("the new CIDR's rule was not written:\n%s", got)
	}
	converged(t, p, fx)
}

// iptables-save escapes an apostrophe in a comment, so a rule with one never matches its
// saved form and every Resync would rewrite the rules.
func TestStaticRulesHaveNoApostrophe(t *testing.T) {
	rc := newRenderConfig(testCfg, []netip.Addr{netip.MustParseAddr("192.0.2.10")},
		[]netip.Prefix{netip.MustParsePrefix("10.96.0.0/16"), netip.MustParsePrefix("fd00:96::/108")})
	for _, f := range []family{v4, v6} {
		chains, jumps := staticChains(f, rc)
		var rules []string
		for _, c := range chains {
			rules = append(rules, c.rules...)
		}
		for _, j := range jumps {
			rules = append(rules, j.spec)
		}
		for _, r := range rules {
			if strings.Contains(r, "'") {
				t.Errorf("%s: apostrophe in %q", f, r)
			}
		}
	}
}

// detectLocalMode BridgeInterface or InterfaceNamePrefix: pods are told by the interface
// their traffic arrives on, in both the ClusterIP's masquerade rule and the external
// chain of an externalTrafficPolicy=Local port; the cluster CIDRs are not read.
func TestLocalInterfaceReplacesClusterCIDRs(t *testing.T) {
	cfg := testCfg
	cfg.LocalInterface = "veth+"
	p, fx := newSynced(t, cfg)
	stage(p, makeService(svcOpts{name: "web", clusterIPs: []string{"10.96.0.10"}, typ: corev1.ServiceTypeNodePort, port: 80, nodePort: 30080, local: true}),
		ep{"10.244.1.11", true}, ep{"10.244.2.12", false})
	if r := p.Open(); r.Err != nil {
		t.Fatal(r.Err)
	}
	out := ops(fx)
	for _, want := range []string{
		`-d 10.96.0.10/32 ! -i veth+ -p tcp -m tcp --dport 80 -m comment --comment "ns/web:p cluster IP from outside the pod interfaces: masquerade" -j KIPVS-MARK-MASQ`,
		`-i veth+ -m comment --comment "ns/web:p pods reach external addresses through the ClusterIP endpoints"`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no rule %q in:\n%s", want, out)
		}
	}
	if strings.Contains(out, "10.244.0.0/16") {
		t.Errorf("the cluster CIDR is still used:\n%s", out)
	}
	converged(t, p, fx)
}

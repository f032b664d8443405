//go:build guest

package firewall_test

import (
	"fmt"
	"net/netip"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/kube-ipvs/kube-ipvs/firewall"
	"github.com/kube-ipvs/kube-ipvs/ipset"
	"github.com/kube-ipvs/kube-ipvs/iptables"
	"github.com/kube-ipvs/kube-ipvs/model"
	"github.com/kube-ipvs/kube-ipvs/proxy"
	"github.com/kube-ipvs/kube-ipvs/test/guestutil"
	"github.com/kube-ipvs/kube-ipvs/test/netnstest"
)

var (
	nodeV4 = netip.MustParseAddr("192.168.1.10")
	nodeV6 = netip.MustParseAddr("2001:db8::10")
)

// scaleService is Service i of the proof: TCP 80 and UDP 53 on a ClusterIP (dual-stack for
// even i), two local endpoints; every fourth (i%4 == 1) a NodePort, every tenth a
// LoadBalancer with externalTrafficPolicy Local, a health-check node port and a source
// range.
func scaleService(i int) (*v1.Service, *discoveryv1.EndpointSlice) {
	name := fmt.Sprintf("s%04d", i)
	v4 := fmt.Sprintf("10.96.%d.%d", i/250, i%250+1)
	svc := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "scale", Name: name},
		Spec: v1.ServiceSpec{
			Type: v1.ServiceTypeClusterIP, ClusterIP: v4, ClusterIPs: []string{v4},
			Ports: []v1.ServicePort{
				{Name: "http", Protocol: v1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080)},
				{Name: "dns", Protocol: v1.ProtocolUDP, Port: 53, TargetPort: intstr.FromInt32(5353)},
			},
		},
	}
	if i%2 == 0 {
		svc.Spec.ClusterIPs = append(svc.Spec.ClusterIPs, fmt.Sprintf("fd00:96::%x", i+1))
	}
	switch {
	case i%10 == 0:
		svc.Spec.Type = v1.ServiceTypeLoadBalancer
		svc.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
		svc.Spec.HealthCheckNodePort = int32(32000 + i/10)
		svc.Spec.LoadBalancerSourceRanges = []string{"198.51.100.0/24"}
		svc.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: fmt.Sprintf("203.0.%d.%d", 113+i/2500, i/10%250+1)}}
		fallthrough
	case i%4 == 1:
		if svc.Spec.Type == v1.ServiceTypeClusterIP {
			svc.Spec.Type = v1.ServiceTypeNodePort
		}
		// TCP and UDP may share a node port number.
		svc.Spec.Ports[0].NodePort = int32(30000 + i)
		svc.Spec.Ports[1].NodePort = int32(30000 + i)
	}
	str := func(s string) *string { return &s }
	p80, p53 := int32(8080), int32(5353)
	tcp, udp := v1.ProtocolTCP, v1.ProtocolUDP
	sl := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "scale", Name: name + "-1", Labels: map[string]string{discoveryv1.LabelServiceName: name}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: str("http"), Port: &p80, Protocol: &tcp}, {Name: str("dns"), Port: &p53, Protocol: &udp}},
		Endpoints: []discoveryv1.Endpoint{
			{Addresses: []string{fmt.Sprintf("10.244.%d.%d", i/125, 2*(i%125)+1)}, NodeName: str("node-a")},
			{Addresses: []string{fmt.Sprintf("10.244.%d.%d", i/125, 2*(i%125)+2)}, NodeName: str("node-a")},
		},
	}
	return svc, sl
}

// expected counts the entries each set must hold for Services 0..n-1, from the Service
// specs rather than AppendMembers, so that it checks that code: one per port and address.
func expected(n int) map[firewall.SetName]int {
	c := map[firewall.SetName]int{}
	for i := range n {
		svc, _ := scaleService(i)
		ports := len(svc.Spec.Ports)
		c[firewall.SetClusterIP] += ports
		c[firewall.SetVIPs]++
		c[firewall.SetLoopBack] += 2 * ports // two endpoints, one target port per Service port
		if len(svc.Spec.ClusterIPs) == 2 {
			c[firewall.SetClusterIP+"-6"] += ports
			c[firewall.SetVIPs+"-6"]++
		}
		switch svc.Spec.Type {
		case v1.ServiceTypeNodePort:
			// Node ports only in the Service's own families.
			c[firewall.SetNodePort] += ports
			if len(svc.Spec.ClusterIPs) == 2 {
				c[firewall.SetNodePort+"-6"] += ports
			}
		case v1.ServiceTypeLoadBalancer:
			c[firewall.SetNodePortLocal] += ports
			if len(svc.Spec.ClusterIPs) == 2 {
				c[firewall.SetNodePortLocal+"-6"] += ports
			}
			c[firewall.SetLoadBalancerLocal] += ports
			// In-cluster marks: the node port on each node IP, and the LB IP.
			c[firewall.SetInClusterLocal] += 2 * ports
			if len(svc.Spec.ClusterIPs) == 2 {
				c[firewall.SetInClusterLocal+"-6"] += ports
			}
			c[firewall.SetLoadBalancerFW] += ports
			c[firewall.SetLBSourceCIDR] += ports
			c[firewall.SetLBSourceIP] += 2 * ports
			c[firewall.SetHealthCheckNodePort]++
			c[firewall.SetVIPs]++
		}
	}
	return c
}

// ourRules is our part of -save: our chains' declarations and rules and the jumps into
// them, without counters.
func ourRules(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	for _, tool := range []string{"iptables-nft-save", "ip6tables-nft-save"} {
		out, err := exec.Command(tool).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", tool, err, out)
		}
		for _, l := range strings.Split(string(out), "\n") {
			switch {
			case strings.HasPrefix(l, "*"), strings.HasPrefix(l, ":KIPVS-"), strings.Contains(l, "KIPVS-") && strings.HasPrefix(l, "-A "):
				if strings.HasPrefix(l, ":") {
					l = strings.Fields(l)[0]
				}
				b.WriteString(l + "\n")
			}
		}
	}
	return b.String()
}

// The proof: with 2,000 Services the rules in the kernel are byte-identical to those with
// one Service, while every set holds exactly one entry per Service port and address; a
// one-Service change costs a handful of ipset writes and no iptables process.
func TestGuestRulesConstantFor2000Services(t *testing.T) {
	guestutil.RequireGuest(t)
	netnstest.EnterNew(t)
	cfg := firewall.Config{ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}, NodeIPs: []netip.Addr{nodeV4, nodeV6}}
	pcfg := &proxy.Config{DefaultScheduler: "rr", NodeName: "node-a", NodeIPs: []netip.Addr{nodeV4, nodeV6}}
	k, err := ipset.NewKernel()
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	sets := ipset.New(k)
	tracker := firewall.NewTracker()
	rules := iptables.New(iptables.OSExec{}, iptables.Config{Backend: iptables.NFT})
	if res := sets.Resync(firewall.Sets(cfg), nil); res.Err != nil || len(res.Errors) > 0 {
		t.Fatalf("ipset Resync: %v %v", res.Err, res.Errors)
	}

	// sync does what the controller does: entries for the changed Services, additions,
	// rules, (IPVS would go here), deletions.
	sync := func(svcs []*v1.Service, slices []*discoveryv1.EndpointSlice) (setWrites, ruleExecs int) {
		updates := map[model.ServiceName][]firewall.Member{}
		for i, svc := range svcs {
			st := proxy.BuildService(svc, []*discoveryv1.EndpointSlice{slices[i]}, pcfg)
			updates[model.ServiceName{Namespace: svc.Namespace, Name: svc.Name}] = firewall.AppendMembers(nil, st, cfg)
		}
		add, del := tracker.UpdateMembers(updates, true)
		r1 := sets.Apply(add)
		v4, v6 := firewall.RenderRules(cfg)
		r2 := rules.Apply(v4, v6)
		r3 := sets.Apply(del)
		for _, r := range []ipset.Result{r1, r3} {
			if r.Err != nil || len(r.Errors) > 0 {
				t.Fatalf("ipset Apply: %v %v", r.Err, r.Errors)
			}
		}
		if r2.Err != nil {
			t.Fatalf("iptables Apply: %v", r2.Err)
		}
		return r1.Writes + r3.Writes, r2.Execs
	}

	const n = 2000
	svcs := make([]*v1.Service, n)
	slices := make([]*discoveryv1.EndpointSlice, n)
	for i := range n {
		svcs[i], slices[i] = scaleService(i)
	}

	sync(svcs[:1], slices[:1])
	one := ourRules(t)
	checkCounts(t, k, expected(1))

	start := time.Now()
	writes, execs := sync(svcs[1:], slices[1:])
	took := time.Since(start)
	if execs != 0 {
		t.Errorf("adding 1,999 Services ran %d iptables processes, want 0", execs)
	}
	all := ourRules(t)
	if one != all {
		t.Errorf("the rules differ between 1 and 2,000 Services:\n--- 1 ---\n%s\n--- 2,000 ---\n%s", one, all)
	}
	want := expected(n)
	total := checkCounts(t, k, want)
	// Entries go in batches: far fewer writes than entries.
	if writes > total/100+2*len(want) {
		t.Errorf("%d ipset writes for %d entries", writes, total)
	}
	t.Logf("2,000 Services: %d entries in %d sets, %d ipset writes, %d iptables processes, %v (rules: %d lines, same as for 1 Service)",
		total, len(want), writes, execs, took, strings.Count(all, "\n-A "))
	out, err := exec.Command("ipset", "list", "-t", firewall.SetClusterIP).CombinedOutput()
	if err != nil || !strings.Contains(string(out), fmt.Sprintf("Number of entries: %d", want[firewall.SetClusterIP])) {
		t.Errorf("ipset list -t %s: %v\n%s", firewall.SetClusterIP, err, out)
	}

	// One Service changes one port: only its entries move, and no rule.
	changed := svcs[7].DeepCopy()
	changed.Spec.Ports[0].Port = 8443
	writes, execs = sync([]*v1.Service{changed}, slices[7:8])
	if execs != 0 || writes == 0 || writes > 4 {
		t.Errorf("one port change: %d ipset writes, %d iptables processes; want 1 to 4 and 0", writes, execs)
	}
	checkCounts(t, k, want)
	if w, e := sync([]*v1.Service{changed}, slices[7:8]); w != 0 || e != 0 {
		t.Errorf("a sync without change wrote %d times and ran %d processes", w, e)
	}

	// One Service deleted: exactly its entries go (the counts of n-1 Services), no rule.
	last := svcs[n-1]
	_, del1 := tracker.UpdateMembers(map[model.ServiceName][]firewall.Member{
		{Namespace: last.Namespace, Name: last.Name}: nil}, true)
	if res := sets.Apply(del1); res.Err != nil || len(res.Errors) > 0 {
		t.Fatalf("deleting one Service's entries: %v %v", res.Err, res.Errors)
	}
	checkCounts(t, k, expected(n-1))
	if ourRules(t) != one {
		t.Error("rules changed when one Service went")
	}

	// Every Service deleted: the sets empty out, the rules stay the same.
	gone := map[model.ServiceName][]firewall.Member{}
	for _, svc := range svcs {
		gone[model.ServiceName{Namespace: svc.Namespace, Name: svc.Name}] = nil
	}
	_, del := tracker.UpdateMembers(gone, true)
	if res := sets.Apply(del); res.Err != nil || len(res.Errors) > 0 {
		t.Fatalf("deleting every entry: %v %v", res.Err, res.Errors)
	}
	checkCounts(t, k, map[firewall.SetName]int{})
	if ourRules(t) != one {
		t.Error("rules changed when the Services went")
	}
}

// checkCounts compares the kernel's entry counts of our sets with want (absent: 0) and
// returns the total.
func checkCounts(t *testing.T, k *ipset.NetlinkKernel, want map[firewall.SetName]int) int {
	t.Helper()
	hs, err := k.ListHeaders()
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	var bad []string
	for _, h := range hs {
		if !strings.HasPrefix(string(h.Name), firewall.Prefix) {
			continue
		}
		total += int(h.Entries)
		if int(h.Entries) != want[h.Name] {
			bad = append(bad, fmt.Sprintf("%s has %d entries, want %d", h.Name, h.Entries, want[h.Name]))
		}
	}
	sort.Strings(bad)
	for _, b := range bad {
		t.Error(b)
	}
	return total
}

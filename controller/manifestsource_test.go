package controller

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/kube-ipvs/kube-ipvs/manifests"
)

// manifestObjects is Service ns/a with one EndpointSlice, n more Services with theirs, two
// Nodes (this one and another) and a ServiceCIDR, keyed as manifests.Load keys them.
func manifestObjects(n int) manifests.Objects {
	objs := manifests.Objects{
		"Service ns/a":         service("a", "10.96.0.1", nil),
		"EndpointSlice ns/a-1": slice("a", "a-1", "10.244.0.1", "10.244.0.2"),
		"Node node-a":          &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a", Labels: map[string]string{corev1.LabelTopologyZone: "zone-a"}}},
		"Node node-b":          &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-b"}},
		"ServiceCIDR extra": &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: "extra"},
			Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{"10.96.0.0/16"}}},
	}
	for i := range n {
		name := fmt.Sprintf("s%d", i)
		objs["Service ns/"+name] = service(name, fmt.Sprintf("10.96.%d.%d", 1+i/250, 1+i%250), nil)
		objs["EndpointSlice ns/"+name+"-1"] = slice(name, name+"-1", fmt.Sprintf("10.244.%d.%d", 1+i/250, 1+i%250))
	}
	return objs
}

// The manifests source feeds the controller through NewFromListerWatchers: its Services and
// EndpointSlices become virtual servers, its ServiceCIDRs the firewall's CIDRs, its Node
// (this one alone) the node's view; a reload of thousands of objects reaches the desired
// state whole, and a reload without them removes them.
func TestManifestSourceReachesTheDesiredState(t *testing.T) {
	src := manifests.NewSource()
	if _, err := src.Sync(manifestObjects(0)); err != nil {
		t.Fatal(err)
	}
	lws := ListerWatchers{
		Services:       src.ListerWatcher("Service"),
		EndpointSlices: src.ListerWatcher("EndpointSlice"),
		Nodes:          src.ListerWatcher("Node"),
		ServiceCIDRs:   src.ListerWatcher("ServiceCIDR"),
	}
	dp := newFakeDP()
	hostAddrs := func() ([]netip.Addr, error) { return []netip.Addr{netip.MustParseAddr("203.0.113.10")}, nil }
	c, err := NewFromListerWatchers(Config{NodeName: "node-a", DefaultScheduler: "rr", SyncPeriod: time.Hour},
		lws, dp, hostAddrs, nil, Observers{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := c.src.start(ctx); err != nil {
		t.Fatal(err)
	}
	c.waitServiceCIDRs(ctx)
	if err := c.sync(true); err != nil {
		t.Fatal(err)
	}
	if vs := dp.vs[vsKey("10.96.0.1", 80)]; vs == nil || len(vs.Reals) != 2 {
		t.Fatalf("Service a's virtual server: %v", vs)
	}
	if got := dp.cidrs.Load(); got == nil || !slices.Equal(*got, []netip.Prefix{netip.MustParsePrefix("10.96.0.0/16")}) {
		t.Errorf("the repair's Service CIDRs: %v, want the ServiceCIDR object's", got)
	}
	nodes, _ := c.src.nodes.List(labels.Everything())
	if len(nodes) != 1 || nodes[0].Name != "node-a" || c.node.zone != "zone-a" {
		t.Errorf("nodes cached %v, zone %q: want node-a alone, in zone-a", nodes, c.node.zone)
	}

	const n = 2000
	waitServices := func(want int) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			svcs, _ := c.src.services.List(labels.Everything())
			sl, _ := c.src.slices.ByIndex(sliceByService, fmt.Sprintf("ns/s%d", n-1))
			if len(svcs) == want && (want == 1) == (len(sl) == 0) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the informers hold %d Services, want %d", len(svcs), want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if _, err := src.Sync(manifestObjects(n)); err != nil {
		t.Fatal(err)
	}
	waitServices(n + 1)
	// The EndpointSlices come through informers of their own, which may still be delivering
	// when the Services are all in: sync until every Service has its endpoint.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if err := c.sync(true); err != nil {
			t.Fatal(err)
		}
		missing := ""
		for i := range n {
			if vs := dp.vs[vsKey(fmt.Sprintf("10.96.%d.%d", 1+i/250, 1+i%250), 80)]; vs == nil || len(vs.Reals) != 1 {
				missing = fmt.Sprintf("Service s%d's virtual server: %v", i, vs)
				break
			}
		}
		if missing == "" && len(dp.vs) == n+1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d virtual servers after the reload, want %d; %s", len(dp.vs), n+1, missing)
		}
	}
	if _, err := src.Sync(manifestObjects(0)); err != nil {
		t.Fatal(err)
	}
	waitServices(1)
	if err := c.sync(true); err != nil {
		t.Fatal(err)
	}
	if len(dp.vs) != 1 || dp.vs[vsKey("10.96.0.1", 80)] == nil {
		t.Errorf("after the reload that removed them: %d virtual servers, want Service a's alone", len(dp.vs))
	}
}

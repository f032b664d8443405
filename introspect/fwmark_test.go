package introspect

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/kube-ipvs/kube-ipvs/ipvs"
	"github.com/kube-ipvs/kube-ipvs/model"
)

// The in-cluster firewall-mark virtual server of an externalTrafficPolicy: Local port goes
// through the document and back to its key, matches the kernel's without drift, and prints
// as ipvsadm prints one ("FWM  MARK").
func TestFirewallMarkVirtualServerRoundTrips(t *testing.T) {
	mark := model.InClusterMark(30080, model.TCP, -1)
	for _, is6 := range []bool{false, true} {
		key := model.FWMarkKey(mark, is6)
		rs := model.RSKey{Addr: netip.MustParseAddr("10.1.0.1"), Port: 8080}
		if is6 {
			rs.Addr = netip.MustParseAddr("fd00::1")
		}
		want := buildVS(&model.VirtualServer{Key: key, Spec: model.VSSpec{Scheduler: "rr"}, Kind: model.KindInCluster,
			Reals: map[model.RSKey]uint32{rs: 1}}, nil, nil, fixtureNow)
		if got, err := vsKey(&want); err != nil || got != key {
			t.Fatalf("document key %v, %v; want %v", got, err, key)
		}
		doc := &Document{Services: []Service{{Namespace: "ns", Name: "web", VirtualServers: []VirtualServer{want}}}}
		kernel := []ipvs.TableVS{{Key: key, Scheduler: "rr", Reals: []ipvs.TableReal{{RS: rs, Weight: 1, Forward: "Masq"}}}}
		rows := Merge(kernel, doc, func(model.VSKey) bool { return true })
		if len(rows) != 1 || rows[0].Drift != "" || rows[0].Kernel == nil {
			t.Fatalf("rows %+v; want the one virtual server, matched, no drift", rows)
		}
		var b strings.Builder
		if err := WriteText(&b, rows, TextOptions{}); err != nil {
			t.Fatal(err)
		}
		head := "FWM  1971331073 rr"
		if is6 {
			head = "FWM  1971331073 IPv6 rr"
		}
		if !strings.Contains(strings.Join(strings.Fields(b.String()), " "), strings.Join(strings.Fields(head), " ")) {
			t.Errorf("listing lacks %q:\n%s", head, b.String())
		}
	}
}

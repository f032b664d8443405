package ipvsmode

import (
	"net/netip"
	"testing"

	"github.com/kube-ipvs/kube-ipvs/dummyif"
	"github.com/kube-ipvs/kube-ipvs/model"
)

// The ownership rule both the repair and `kube-ipvs cleanup` apply.
func TestOwnsVirtualServer(t *testing.T) {
	cfg := Config{ExcludeCIDRs: []netip.Prefix{netip.MustParsePrefix("10.96.9.0/24")}, NodePortMin: 30000, NodePortMax: 32767}
	dummy := map[netip.Addr]bool{netip.MustParseAddr("10.96.0.1"): true, netip.MustParseAddr("10.96.9.1"): true, netip.MustParseAddr("fd00::1"): true}
	node := map[netip.Addr]bool{netip.MustParseAddr("203.0.113.10"): true, netip.MustParseAddr("10.96.9.2"): true}
	for _, tc := range []struct {
		addr string
		port uint16
		want bool
	}{
		{"10.96.0.1", 80, true},        // on the dummy link, any port
		{"fd00::1", 53, true},          // IPv6 too
		{"203.0.113.10", 30000, true},  // node IP, first NodePort
		{"203.0.113.10", 32767, true},  // node IP, last NodePort
		{"203.0.113.10", 29999, false}, // node IP, below the range
		{"203.0.113.10", 32768, false}, // node IP, above the range
		{"198.51.100.1", 30080, false}, // neither on the dummy nor a node IP
		{"10.96.9.1", 80, false},       // on the dummy, but excluded
		{"10.96.9.2", 30080, false},    // a NodePort, but excluded
	} {
		k := model.VSKey{Addr: netip.MustParseAddr(tc.addr), Proto: model.TCP, Port: tc.port}
		got := cfg.OwnsVirtualServer(k, func(a netip.Addr) bool { return dummy[a] }, func(a netip.Addr) bool { return node[a] })
		if got != tc.want {
			t.Errorf("%s: owned %v, want %v", k, got, tc.want)
		}
	}
}

// Only the address binding is watched through address notifications: with local routes the
// repair cycle must list the routes, so there is no watcher to trust.
func TestRouteBindingHasNoAddressWatcher(t *testing.T) {
	if w := vipWatcher(dummyif.BindRoute, "kube-ipvs0"); w != nil {
		t.Errorf("route binding got watcher %T; its drift would never be repaired", w)
	}
	for _, b := range []dummyif.Binding{dummyif.BindAddress, ""} {
		if w := vipWatcher(b, "kube-ipvs0"); w == nil {
			t.Errorf("binding %q has no watcher", b)
		}
	}
}

// Firewall-mark virtual servers are the proxy's only with the layout of its in-cluster marks
// (a CNI's or an operator's other marks are left alone), in either family.
func TestOwnsFirewallMarkVirtualServer(t *testing.T) {
	cfg := Config{NodePortMin: 30000, NodePortMax: 32767}
	none := func(netip.Addr) bool { return false }
	for _, tc := range []struct {
		mark uint32
		want bool
	}{
		{model.InClusterMark(30101, model.TCP, -1), true},
		{model.InClusterMark(32201, model.SCTP, 3), true}, // by the health-check node port
		{1, false},                  // ipvsadm -A -f 1
		{0x4000, false},             // a masquerade mark
		{0x2001, false},             // our bit, but no port
		{30101<<16 | 0x2000, false}, // no protocol
		{30101<<16 | 0x6001, false}, // the masquerade bit set
	} {
		for _, is6 := range []bool{false, true} {
			k := model.FWMarkKey(tc.mark, is6)
			if got := cfg.OwnsVirtualServer(k, none, none); got != tc.want {
				t.Errorf("%s: owned %v, want %v", k, got, tc.want)
			}
		}
	}
}

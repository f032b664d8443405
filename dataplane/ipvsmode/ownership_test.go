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

// Each binding is watched through its own notifications: addresses, or the proxy's local
// routes (and the link going down); a watcher of the wrong kind would never hear the drift.
func TestEachBindingHasItsWatcher(t *testing.T) {
	for b, routes := range map[dummyif.Binding]bool{dummyif.BindRoute: true, dummyif.BindAddress: false, "": false} {
		w, ok := vipWatcher(b, "kube-ipvs0").(*dummyif.Watcher)
		if !ok || w.FollowsRoutes() != routes {
			t.Errorf("binding %q: watcher %T following routes %v, want %v", b, w, ok && w.FollowsRoutes(), routes)
		}
	}
}

package iptproxy

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/kube-ipvs/kube-ipvs/model"
)

func udpVS(addr string, reals ...string) *model.VirtualServer {
	ap := netip.MustParseAddrPort(addr)
	vs := &model.VirtualServer{Key: model.VSKey{Addr: ap.Addr(), Proto: model.UDP, Port: ap.Port()}, Reals: map[model.RSKey]uint32{}}
	for _, r := range reals {
		rp := netip.MustParseAddrPort(r)
		vs.Reals[model.RSKey{Addr: rp.Addr(), Port: rp.Port()}] = 1
	}
	return vs
}

func flows(vses ...*model.VirtualServer) map[model.VSKey]*model.VirtualServer {
	m := map[model.VSKey]*model.VirtualServer{}
	for _, v := range vses {
		m[v.Key] = v
	}
	return m
}

func TestFlowTrackerReportWhatIPVSModeClears(t *testing.T) {
	dns := "10.96.0.53:53"
	key := udpVS(dns).Key
	tcp := udpVS("10.96.0.10:80", "10.244.0.1:8080")
	tcp.Key.Proto = model.TCP
	u := NewFlowTracker()

	// The first Resync learns silently, even endpoints of a Service with none before.
	res := u.Resync(flows(udpVS(dns, "10.244.0.1:5353", "10.244.0.2:5353"), tcp))
	if len(res.Removed)+len(res.First) != 0 {
		t.Fatalf("first Resync reported %v %v, want nothing", res.Removed, res.First)
	}
	// An endpoint leaves: its flows go.
	res = u.Apply(flows(udpVS(dns, "10.244.0.2:5353")))
	if got := fmt.Sprint(res.Removed); got != fmt.Sprintf("[{%v 10.244.0.1:5353}]", key) || len(res.First) != 0 {
		t.Fatalf("endpoint removed: %v %v", res.Removed, res.First)
	}
	// The last one leaves, then one comes: the Service's flows from the empty time go.
	res = u.Apply(flows(udpVS(dns)))
	if got := fmt.Sprint(res.Removed); got != fmt.Sprintf("[{%v 10.244.0.2:5353}]", key) {
		t.Fatalf("last endpoint removed: %v", res.Removed)
	}
	res = u.Apply(flows(udpVS(dns, "10.244.0.3:5353")))
	if len(res.Removed) != 0 || fmt.Sprint(res.First) != fmt.Sprintf("[%v]", key) {
		t.Fatalf("first endpoint: %v %v", res.Removed, res.First)
	}
	// Nothing changed: nothing to clear; TCP is never reported.
	res = u.Apply(flows(udpVS(dns, "10.244.0.3:5353"), tcp))
	if len(res.Removed)+len(res.First) != 0 {
		t.Fatalf("no change reported %v %v", res.Removed, res.First)
	}
	// The Service is deleted: its endpoints' flows go, at an Apply or at a later Resync.
	res = u.Apply(map[model.VSKey]*model.VirtualServer{key: nil})
	if got := fmt.Sprint(res.Removed); got != fmt.Sprintf("[{%v 10.244.0.3:5353}]", key) {
		t.Fatalf("Service deleted: %v", res.Removed)
	}
	u.Apply(flows(udpVS(dns, "10.244.0.4:5353")))
	res = u.Resync(flows(tcp))
	if got := fmt.Sprint(res.Removed); got != fmt.Sprintf("[{%v 10.244.0.4:5353}]", key) {
		t.Fatalf("Service gone at a Resync: %v", res.Removed)
	}
}

// When writing the rules failed, the flows cleared meanwhile may have been recreated the
// old way: the Resync of the repair reports them again, and only then.
func TestFlowTrackerReplayAfterAFirewallFailure(t *testing.T) {
	dns := "10.96.0.53:53"
	key := udpVS(dns).Key
	u := NewFlowTracker()
	u.Resync(flows(udpVS(dns, "10.244.0.1:5353", "10.244.0.2:5353")))
	want := fmt.Sprintf("[{%v 10.244.0.1:5353}]", key)

	u.Apply(flows(udpVS(dns, "10.244.0.2:5353")))
	if res := u.Resync(flows(udpVS(dns, "10.244.0.2:5353"))); len(res.Removed) != 0 {
		t.Fatalf("a repair without a firewall failure reported %v again", res.Removed)
	}

	u.Apply(flows(udpVS(dns, "10.244.0.1:5353", "10.244.0.2:5353")))
	u.Apply(flows(udpVS(dns, "10.244.0.2:5353")))
	u.FirewallFailed()
	if res := u.Resync(flows(udpVS(dns, "10.244.0.2:5353"))); fmt.Sprint(res.Removed) != want {
		t.Fatalf("the repair after a firewall failure reported %v, want %s", res.Removed, want)
	}
	if res := u.Resync(flows(udpVS(dns, "10.244.0.2:5353"))); len(res.Removed) != 0 {
		t.Fatalf("the next repair reported %v again", res.Removed)
	}
}

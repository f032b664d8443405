//go:build guest

package e2e

import (
	"net/netip"
	"testing"

	"github.com/kube-ipvs/kube-ipvs/test/guestutil"
)

// wrr and wlc with the weights kube-ipvs sets today, 1 and 0 (docs/schedulers.md): with
// equal weights wrr takes turns exactly as rr and wlc balances as lc; a real server at
// weight 0 (here a removed endpoint that drains; health checks are to use the same 0)
// gets no new connection, not even from wlc when it is the least loaded, while the
// connections it has keep working.
func TestSchedulerWeightedEqualAndZeroWeights(t *testing.T) {
	dir := setupNode(t)
	pods := backends(t, "wt", 44, 3)
	cli := client(t, "wtc", "10.244.49.4")
	const wrrVIP, wlcVIP = "10.96.144.1", "10.96.144.2"
	set := func(ps ...*guestutil.Pod) {
		e := eps(podIPs(ps)...)
		writeManifests(t, dir, "svc.yaml",
			schedService("wrr", wrrVIP, "wrr", ""), sliceYAML("wrr", "wrr-1", "TCP", 8080, "", e...),
			schedService("wlc", wlcVIP, "wlc", ""), sliceYAML("wlc", "wlc-1", "TCP", 8080, "", e...))
	}
	set(pods...)
	p := startProxy(t, dir, "--graceful-termination-timeout", "5m")
	eventually(t, schedStart, "both virtual servers with 3 real servers", func() bool {
		return realServers(vsBlock(t, "TCP", wrrVIP+":80")) == 3 && realServers(vsBlock(t, "TCP", wlcVIP+":80")) == 3
	})
	names := podNames(pods)

	checkWRRTakesTurns(t, cli, wrrVIP)
	wlc := newHeldSet(t)
	for i := 0; i < 6; i++ {
		wlc.hold(t, cli, wlcVIP)
		waitActive(t, wlcVIP, i+1)
	}
	if s := spread(wlc.byName, names); s != 0 {
		t.Errorf("wlc with equal weights: 6 held connections %v; want 2 on each backend", wlc.byName)
	}

	// Make the backend to be removed the least loaded one for wlc (one connection left),
	// and hold one wrr connection to it.
	gone := pods[2]
	var wlcKept *guestutil.Conn
	for _, c := range wlc.conns {
		if c.First == gone.Name && wlcKept == nil {
			wlcKept = c
		} else if c.First == gone.Name {
			c.Reset()
			wlc.byName[gone.Name]--
		}
	}
	waitActive(t, wlcVIP, 5)
	wrrHeld := newHeldSet(t)
	var wrrKept *guestutil.Conn
	for i := 0; i < 3 && wrrKept == nil; i++ {
		if c := wrrHeld.hold(t, cli, wrrVIP); c.First == gone.Name {
			wrrKept = c
		}
	}
	if wrrKept == nil {
		t.Fatalf("3 wrr connections in turn never reached %s: %v", gone.Name, wrrHeld.byName)
	}

	set(pods[:2]...)
	p.reload()
	goneRS := gone.IP(4).String() + ":8080"
	eventually(t, firstSync, gone.Name+" at weight 0 in both virtual servers", func() bool {
		return weights(vsBlock(t, "TCP", wrrVIP+":80"))[goneRS] == "0" && weights(vsBlock(t, "TCP", wlcVIP+":80"))[goneRS] == "0"
	})
	if got := ask(t, cli, wrrVIP+":80", 12); got[names[0]] != 6 || got[names[1]] != 6 {
		t.Errorf("wrr with %s at weight 0: 12 connections went %v; want 6 on each of the others", gone.Name, got)
	}
	before := len(wlc.conns)
	for i := 0; i < 4; i++ {
		wlc.hold(t, cli, wlcVIP)
	}
	if n := wlc.byName[gone.Name]; n != 1 {
		t.Errorf("wlc: %s at weight 0 with the fewest connections got %d of %d new ones; want none", gone.Name, n-1, len(wlc.conns)-before)
	}
	for _, c := range []*guestutil.Conn{wrrKept, wlcKept} {
		if name, err := c.Ask(); err != nil || name != gone.Name {
			t.Errorf("a held connection to the weight-0 backend answered %q, %v; want %s", name, err, gone.Name)
		}
	}
}

// checkWRRTakesTurns: with equal weights, 9 connections in turn go to the 3 backends in a
// fixed cycle, as rr's do.
func checkWRRTakesTurns(t *testing.T, cli *guestutil.Pod, vip string) {
	t.Helper()
	var order []string
	for i := 0; i < 9; i++ {
		name, err := cli.AskTCP(netip.MustParseAddrPort(vip + ":80"))
		if err != nil {
			t.Fatal(err)
		}
		order = append(order, name)
	}
	distinct := map[string]bool{order[0]: true, order[1]: true, order[2]: true}
	for i := range order {
		if len(distinct) != 3 || order[i] != order[i%3] {
			t.Errorf("wrr with equal weights: connections went %v; want a cycle through the 3 backends", order)
			return
		}
	}
}

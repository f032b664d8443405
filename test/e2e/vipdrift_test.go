//go:build guest

package e2e

import (
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
)

// driftLimit is how soon drift of kube-ipvs0 must be repaired: the proxy hears of it from
// netlink notifications, not from the periodic repair (which this test puts an hour away).
const driftLimit = time.Second

// timeUntil polls every 5 ms until cond holds, and returns how long that took; it fails the
// test after limit.
func timeUntil(t *testing.T, limit time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > limit {
			t.Fatalf("%s: not within %s", what, limit)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return time.Since(start)
}

func run(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v %s", name, strings.Join(args, " "), err, out)
	}
}

// An address removed from kube-ipvs0 by hand, the link deleted, and the link set up and down
// (which flushes its IPv6 addresses) are each repaired within a second, with the periodic
// repair an hour away, and traffic to the ClusterIP works again.
func TestVIPDriftIsRepairedFromNotifications(t *testing.T) {
	dir := setupNode(t)
	backends(t, "vd", 8, 1)
	cli := client(t, "vdc", "10.244.9.9")
	const vip, vip6 = "10.96.80.1", "fd00:96::80"
	writeManifests(t, dir, "svc.yaml",
		serviceYAML(svcOpts{name: "web", clusterIP: vip, port: 80, targetPort: 8080}),
		sliceYAML("web", "web-1", "TCP", 8080, "", eps("10.244.8.11")...),
		serviceYAML(svcOpts{name: "web6", clusterIP: vip6, port: 80, targetPort: 8080, family: "IPv6"}))
	p := startProxy(t, dir, "--sync-period", "1h")
	eventually(t, firstSync, "the virtual server and both VIPs", func() bool {
		a := dummyAddrs(t)
		return realServers(vsBlock(t, "TCP", vip+":80")) == 1 && a[vip] && a[vip6]
	})
	p.waitLog(`msg="sync done" full=true`) // drift during the first sync waits for its end
	if got := ask(t, cli, vip+":80", 1); got["vd1"] != 1 {
		t.Fatalf("before the drift: %v", got)
	}
	fullSyncs := func() int { return strings.Count(p.Log(), `msg="sync done" full=true`) }
	before := fullSyncs()

	run(t, "ip", "addr", "del", vip+"/32", "dev", "kube-ipvs0")
	took := timeUntil(t, driftLimit, "the removed VIP back on kube-ipvs0", func() bool { return dummyAddrs(t)[vip] })
	t.Logf("an address removed by hand was back after %s", took.Round(time.Millisecond))
	if got := ask(t, cli, vip+":80", 1); got["vd1"] != 1 {
		t.Errorf("after the address came back: %v", got)
	}

	run(t, "ip", "link", "del", "kube-ipvs0")
	took = timeUntil(t, driftLimit, "kube-ipvs0 re-created with both VIPs", func() bool {
		a := dummyAddrs(t)
		return a[vip] && a[vip6]
	})
	t.Logf("the deleted link was back with its addresses after %s", took.Round(time.Millisecond))
	if got := ask(t, cli, vip+":80", 1); got["vd1"] != 1 {
		t.Errorf("after the link came back: %v", got)
	}
	if l, err := netlink.LinkByName("kube-ipvs0"); err != nil || l.Type() != "dummy" {
		t.Fatalf("kube-ipvs0 after the repair: %v, %v", l, err)
	}

	// Down is kube-ipvs0's normal state; up then down again drops its IPv6 addresses.
	run(t, "ip", "link", "set", "kube-ipvs0", "up")
	run(t, "ip", "link", "set", "kube-ipvs0", "down")
	took = timeUntil(t, driftLimit, "the IPv6 VIP back after the link was set down", func() bool { return dummyAddrs(t)[vip6] })
	t.Logf("the IPv6 VIP flushed by setting the link down was back after %s", took.Round(time.Millisecond))
	if got := ask(t, cli, vip+":80", 1); got["vd1"] != 1 {
		t.Errorf("after the link was set down: %v", got)
	}

	if n := fullSyncs(); n != before {
		t.Errorf("%d full syncs ran during the test; the drift must be repaired without one", n-before)
	}
	if !strings.Contains(p.Log(), "drift of the dummy interface repaired") {
		t.Error("the log does not say the drift was repaired")
	}
}

// With --vip-binding=route the kernel's route and link notifications do the same: a local
// route of the proxy's deleted by hand, the link deleted, and the link set down (a down link
// loses its local routes) are each repaired within a second, with the periodic repair an
// hour away, and traffic to the ClusterIP works again.
func TestRouteVIPDriftIsRepairedFromNotifications(t *testing.T) {
	dir := setupNode(t)
	backends(t, "rd", 8, 1)
	cli := client(t, "rdc", "10.244.9.9")
	const vip, vip6 = "10.96.81.1", "fd00:96::81"
	writeManifests(t, dir, "svc.yaml",
		serviceYAML(svcOpts{name: "web", clusterIP: vip, port: 80, targetPort: 8080}),
		sliceYAML("web", "web-1", "TCP", 8080, "", eps("10.244.8.11")...),
		serviceYAML(svcOpts{name: "web6", clusterIP: vip6, port: 80, targetPort: 8080, family: "IPv6"}))
	p := startProxy(t, dir, "--sync-period", "1h", "--vip-binding", "route")
	both := func() bool { r := proxyRoutes(t); return r[vip] && r[vip6] }
	eventually(t, firstSync, "the virtual server and both VIP routes", func() bool {
		return realServers(vsBlock(t, "TCP", vip+":80")) == 1 && both()
	})
	p.waitLog(`msg="sync done" full=true`) // drift during the first sync waits for its end
	if got := ask(t, cli, vip+":80", 1); got["rd1"] != 1 {
		t.Fatalf("before the drift: %v", got)
	}
	fullSyncs := func() int { return strings.Count(p.Log(), `msg="sync done" full=true`) }
	before := fullSyncs()

	repairs := func() int { return strings.Count(p.Log(), "drift of the dummy interface repaired") }
	before0 := repairs()
	run(t, "ip", "route", "del", "local", vip, "dev", "kube-ipvs0", "table", "local", "proto", "75", "metric", "75")
	// The route may be back before it can be looked at: the repair's log line says it went.
	took := timeUntil(t, driftLimit, "the removed VIP route back", func() bool { return repairs() > before0 && proxyRoutes(t)[vip] })
	t.Logf("a route removed by hand was back after %s", took.Round(time.Millisecond))
	if got := ask(t, cli, vip+":80", 1); got["rd1"] != 1 {
		t.Errorf("after the route came back: %v", got)
	}

	before0 = repairs()
	run(t, "ip", "link", "del", "kube-ipvs0")
	took = timeUntil(t, driftLimit, "kube-ipvs0 re-created with both VIP routes", func() bool { return repairs() > before0 && both() })
	t.Logf("the deleted link was back with its routes after %s", took.Round(time.Millisecond))

	before0 = repairs()
	run(t, "ip", "link", "set", "kube-ipvs0", "down")
	took = timeUntil(t, driftLimit, "the link up again with both VIP routes", func() bool {
		l, err := netlink.LinkByName("kube-ipvs0")
		return repairs() > before0 && err == nil && l.Attrs().Flags&net.FlagUp != 0 && both()
	})
	t.Logf("the link set down was up with its routes after %s", took.Round(time.Millisecond))
	if got := ask(t, cli, vip+":80", 1); got["rd1"] != 1 {
		t.Errorf("after the link was set down: %v", got)
	}
	if n := fullSyncs(); n != before {
		t.Errorf("%d full syncs ran during the test; the drift must be repaired without one", n-before)
	}
}

// With a small step budget the periodic repair runs in many steps; at each cycle's end the
// log and the metrics give its length, its share of a core and its longest step, and a
// flushed IPVS table is repaired within a cycle.
func TestRepairCyclesAreLoggedAndMeasured(t *testing.T) {
	dir := setupNode(t)
	backends(t, "rc", 10, 1)
	cli := client(t, "rcc", "10.244.9.10")
	var docs []string
	for i := 1; i <= 20; i++ {
		name := "s" + strconv.Itoa(i)
		docs = append(docs, serviceYAML(svcOpts{name: name, clusterIP: "10.96.90." + strconv.Itoa(i), port: 80, targetPort: 8080}),
			sliceYAML(name, name+"-1", "TCP", 8080, "", eps("10.244.10.11")...))
	}
	writeManifests(t, dir, "svc.yaml", docs...)
	p := startProxy(t, dir, "--repair-step", "3", "--sync-period", "1s")
	m := p.waitLog(`msg="repair cycle done" steps=(\d+) unchanged_services=(\d+) took=(\S+) busy=\S+ core_share=(\S+) longest_step=(\S+)`)
	t.Logf("a repair cycle of 20 Services at 3 a step: %s steps, %s Services unchanged, took %s, core share %s, longest step %s", m[1], m[2], m[3], m[4], m[5])
	// The Services' objects are those they were built from: one step passes over all 20
	// (up to 16 per Service of the step's budget), one begins the repair, 7 check IPVS; the
	// sets and rules are checked in the background, and steps that wait for them may follow.
	if n, _ := strconv.Atoi(m[1]); n < 9 {
		t.Errorf("%s steps, want at least 9", m[1])
	}
	if m[2] != "20" {
		t.Errorf("%s Services passed over as unchanged, want all 20", m[2])
	}

	// The next cycle starts a sync period, or five times the last cycle's busy time, after
	// the last one ended (the firewall step alone takes seconds under emulation).
	run(t, "ipvsadm", "-C")
	eventually(t, firstSync, "the flushed table repaired by a cycle", func() bool {
		return realServers(vsBlock(t, "TCP", "10.96.90.20:80")) == 1
	})
	if got := ask(t, cli, "10.96.90.7:80", 1); got["rc1"] != 1 {
		t.Errorf("after the repair: %v", got)
	}
	_, _, body := httpGet(t, "http://127.0.0.1:10249/metrics")
	for _, name := range []string{"kube_ipvs_repair_cycle_duration_seconds_count", "kube_ipvs_repair_cycle_core_share", "kube_ipvs_repair_step_max_duration_seconds"} {
		if v, ok := metricValue(body, name); !ok || (strings.HasSuffix(name, "_count") && v < 1) {
			t.Errorf("metric %s: %v, %v", name, v, ok)
		}
	}
	// The table is back before the cycle that wrote it ends and logs.
	p.waitLog(`msg="repair cycle done" steps=\d+ .* ipvs_writes=([1-9]\d*)`)
}

//go:build guest

package e2e

import (
	"net/netip"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/kube-ipvs/kube-ipvs/test/guestutil"
)

// Endpoints added, removed or turned not-ready: traffic follows; a deleted Service leaves no
// virtual server and no address behind.
func TestEndpointChangesAndServiceDeletion(t *testing.T) {
	dir := setupNode(t)
	backends(t, "ec", 3, 3)
	cli := client(t, "ecc", "10.244.9.3")
	svc := serviceYAML(svcOpts{name: "web", clusterIP: "10.96.30.1", port: 80, targetPort: 8080})
	other := serviceYAML(svcOpts{name: "other", clusterIP: "10.96.30.2", port: 80, targetPort: 8080})
	otherSlice := sliceYAML("other", "other-1", "TCP", 8080, "", eps("10.244.3.11")...)
	writeManifests(t, dir, "svc.yaml", svc, sliceYAML("web", "web-1", "TCP", 8080, "", eps("10.244.3.11", "10.244.3.12")...), other, otherSlice)
	p := startProxy(t, dir)
	eventually(t, firstSync, "two real servers", func() bool { return realServers(vsBlock(t, "TCP", "10.96.30.1:80")) == 2 })
	if got := ask(t, cli, "10.96.30.1:80", 6); got["ec1"] != 3 || got["ec2"] != 3 {
		t.Fatalf("two endpoints: %v", got)
	}

	// Added.
	writeManifests(t, dir, "svc.yaml", svc, sliceYAML("web", "web-1", "TCP", 8080, "", eps("10.244.3.11", "10.244.3.12", "10.244.3.13")...), other, otherSlice)
	p.reload()
	eventually(t, 10*time.Second, "the third endpoint to take traffic", func() bool {
		got := ask(t, cli, "10.96.30.1:80", 3)
		return got["ec1"] == 1 && got["ec2"] == 1 && got["ec3"] == 1
	})

	// Turned not-ready, and one removed: only ec3 remains.
	writeManifests(t, dir, "svc.yaml", svc, sliceYAML("web", "web-1", "TCP", 8080, "", ep{ip: "10.244.3.11", notReady: true}, ep{ip: "10.244.3.13"}), other, otherSlice)
	p.reload()
	eventually(t, 10*time.Second, "traffic to follow the not-ready and removed endpoints", func() bool {
		got := ask(t, cli, "10.96.30.1:80", 4)
		return got["ec3"] == 4
	})
	if n := activeReals(vsBlock(t, "TCP", "10.96.30.1:80")); n != 1 {
		t.Errorf("virtual server has %d real servers taking traffic, want 1:\n%s", n, ipvsadm(t))
	}

	// Deleted: no virtual server, no address; the other Service is untouched.
	writeManifests(t, dir, "svc.yaml", other, otherSlice)
	p.reload()
	eventually(t, 10*time.Second, "the deleted Service's virtual server to go", func() bool {
		return vsBlock(t, "TCP", "10.96.30.1:80") == "" && !dummyAddrs(t)["10.96.30.1"]
	})
	if got := ask(t, cli, "10.96.30.2:80", 2); got["ec1"] != 2 {
		t.Errorf("the other Service: %v", got)
	}
}

// An IPv6 ClusterIP carries traffic to IPv6 pods.
func TestIPv6ClusterIP(t *testing.T) {
	dir := setupNode(t)
	var names []string
	for i := 1; i <= 2; i++ {
		name := "v6b" + strconv.Itoa(i)
		p := guestutil.NewPod(t, name, netip.MustParseAddr("10.244.4.1"+strconv.Itoa(i)), netip.MustParseAddr("fd00:244:4::1"+strconv.Itoa(i)))
		p.ServeTCP(t, 8080, name)
		names = append(names, name)
	}
	cli := guestutil.NewPod(t, "v6c", netip.MustParseAddr("10.244.9.6"), netip.MustParseAddr("fd00:244:9::6"))
	writeManifests(t, dir, "svc.yaml",
		strings.Replace(serviceYAML(svcOpts{name: "v6", clusterIP: "fd00:96::10", port: 80, targetPort: 8080}), "  type: ClusterIP\n", "  type: ClusterIP\n  ipFamilies: [IPv6]\n", 1),
		sliceYAML("v6", "v6-1", "TCP", 8080, "IPv6", eps("fd00:244:4::11", "fd00:244:4::12")...))
	startProxy(t, dir)
	eventually(t, firstSync, "the IPv6 virtual server", func() bool { return realServers(vsBlock(t, "TCP", "[fd00:96::10]:80")) == 2 })
	got := ask(t, cli, "[fd00:96::10]:80", 4)
	if got[names[0]] != 2 || got[names[1]] != 2 {
		t.Errorf("IPv6 round robin: %v", got)
	}
}

// A Service with an invalid scheduler gets a Warning Event and rr; the others are unaffected.
func TestInvalidSchedulerAnnotation(t *testing.T) {
	dir := setupNode(t)
	backends(t, "is", 5, 2)
	cli := client(t, "isc", "10.244.9.5")
	writeManifests(t, dir, "svc.yaml",
		serviceYAML(svcOpts{name: "bad", clusterIP: "10.96.50.1", port: 80, targetPort: 8080, annotations: map[string]string{"kube-ipvs.io/scheduler": "fastest"}}),
		sliceYAML("bad", "bad-1", "TCP", 8080, "", eps("10.244.5.11", "10.244.5.12")...),
		serviceYAML(svcOpts{name: "good", clusterIP: "10.96.50.2", port: 80, targetPort: 8080, annotations: map[string]string{"kube-ipvs.io/scheduler": "lc"}}),
		sliceYAML("good", "good-1", "TCP", 8080, "", eps("10.244.5.11", "10.244.5.12")...),
		// twos is a valid scheduler name, but only kernels 6.7 and newer have ip_vs_twos.
		serviceYAML(svcOpts{name: "missing", clusterIP: "10.96.50.3", port: 80, targetPort: 8080, annotations: map[string]string{"kube-ipvs.io/scheduler": "twos"}}),
		sliceYAML("missing", "missing-1", "TCP", 8080, "", eps("10.244.5.11")...))
	p := startProxy(t, dir)
	m := p.waitLog(`msg=event type=Warning reason=InvalidScheduler object="Service e2e/bad" message="((?:[^"\\]|\\.)*)"`)
	if !strings.Contains(m[1], "fastest") || !strings.Contains(m[1], "rr") {
		t.Errorf("event message %q must name the bad value and the scheduler used", m[1])
	}
	eventually(t, 10*time.Second, "both virtual servers", func() bool {
		return strings.HasPrefix(vsBlock(t, "TCP", "10.96.50.1:80"), "TCP  10.96.50.1:80 rr") &&
			strings.HasPrefix(vsBlock(t, "TCP", "10.96.50.2:80"), "TCP  10.96.50.2:80 lc")
	})
	if got := ask(t, cli, "10.96.50.1:80", 4); got["is1"] != 2 || got["is2"] != 2 {
		t.Errorf("the Service with the bad annotation does not balance rr: %v", got)
	}
	if got := ask(t, cli, "10.96.50.2:80", 2); len(got) == 0 {
		t.Errorf("the good Service does not answer")
	}
	// twos came with Linux 6.7: Debian's 6.12 serves it; 5.10 and 6.1 lack it, and the
	// Service gets rr with a SchedulerUnavailable event.
	if guestutil.KernelAtLeast(t, 6, 7) {
		eventually(t, 10*time.Second, "the Service asking for twos to get it on kernel "+guestutil.KernelRelease(t), func() bool {
			return strings.HasPrefix(vsBlock(t, "TCP", "10.96.50.3:80"), "TCP  10.96.50.3:80 twos")
		})
		if got := ask(t, cli, "10.96.50.3:80", 1); got["is1"] != 1 {
			t.Errorf("the Service with scheduler twos: %v", got)
		}
		if strings.Contains(p.Log(), `reason=SchedulerUnavailable object="Service e2e/missing"`) {
			t.Errorf("SchedulerUnavailable for twos on kernel %s, which has it:\n%s", guestutil.KernelRelease(t), p.Log())
		}
		return
	}
	p.waitLog(`msg=event type=Warning reason=SchedulerUnavailable object="Service e2e/missing"`)
	eventually(t, 10*time.Second, "the Service asking for a missing scheduler to get rr", func() bool {
		return strings.HasPrefix(vsBlock(t, "TCP", "10.96.50.3:80"), "TCP  10.96.50.3:80 rr")
	})
	if got := ask(t, cli, "10.96.50.3:80", 1); got["is1"] != 1 {
		t.Errorf("the Service with a missing scheduler: %v", got)
	}
}

// Changing the scheduler, its flags and affinity updates the virtual server in place: an
// established connection survives.
func TestSchedulerChangeInPlaceKeepsConnections(t *testing.T) {
	dir := setupNode(t)
	backends(t, "ip", 10, 2)
	cli := client(t, "ipc", "10.244.9.10")
	slice := sliceYAML("web", "web-1", "TCP", 8080, "", eps("10.244.10.11", "10.244.10.12")...)
	writeManifests(t, dir, "svc.yaml", serviceYAML(svcOpts{name: "web", clusterIP: "10.96.100.1", port: 80, targetPort: 8080}), slice)
	p := startProxy(t, dir)
	eventually(t, firstSync, "the virtual server", func() bool { return realServers(vsBlock(t, "TCP", "10.96.100.1:80")) == 2 })
	conn, err := cli.DialTCP(netip.MustParseAddrPort("10.96.100.1:80"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	writeManifests(t, dir, "svc.yaml", serviceYAML(svcOpts{name: "web", clusterIP: "10.96.100.1", port: 80, targetPort: 8080, affinity: true,
		annotations: map[string]string{"kube-ipvs.io/scheduler": "mh", "kube-ipvs.io/scheduler-flags": "mh-port"}}), slice)
	p.reload()
	eventually(t, 10*time.Second, "mh with mh-port and persistence", func() bool {
		return strings.HasPrefix(vsBlock(t, "TCP", "10.96.100.1:80"), "TCP  10.96.100.1:80 mh (mh-port) persistent 300")
	})
	if !strings.Contains(p.Log(), "ipvs_writes=1 addr_writes=0") {
		t.Errorf("the change was not a single in-place update:\n%s", p.Log())
	}
	if name, err := conn.Ask(); err != nil || name != conn.First {
		t.Errorf("the established connection after the change answered %q, %v; want %q", name, err, conn.First)
	}
}

// kill -9 and restart: an established connection through the VIP keeps working and the first
// sync of the new process writes nothing.
func TestRestartKeepsConnectionsAndWritesNothing(t *testing.T) {
	dir := setupNode(t)
	backends(t, "rs", 6, 2)
	cli := client(t, "rsc", "10.244.9.7")
	writeManifests(t, dir, "svc.yaml",
		serviceYAML(svcOpts{name: "web", clusterIP: "10.96.60.1", port: 80, targetPort: 8080, annotations: map[string]string{"kube-ipvs.io/scheduler": "wrr"}}),
		sliceYAML("web", "web-1", "TCP", 8080, "", eps("10.244.6.11", "10.244.6.12")...),
		serviceYAML(svcOpts{name: "np", typ: "NodePort", clusterIP: "10.96.60.2", port: 80, targetPort: 8080, nodePort: 30090, affinity: true}),
		sliceYAML("np", "np-1", "TCP", 8080, "", eps("10.244.6.11")...))
	p := startProxy(t, dir)
	eventually(t, firstSync, "the virtual servers", func() bool {
		return realServers(vsBlock(t, "TCP", "10.96.60.1:80")) == 2 && realServers(vsBlock(t, "TCP", nodeIP+":30090")) == 1
	})
	conn, err := cli.DialTCP(netip.MustParseAddrPort("10.96.60.1:80"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	before := ipvsadm(t)

	p.kill9()
	p2 := startProxy(t, dir)
	m := p2.waitLog(`msg="sync done" full=true services=\d+ (ipvs_writes=\d+ addr_writes=\d+ ipset_writes=\d+ iptables_restores=\d+ errors=\d+)`)
	if m[1] != "ipvs_writes=0 addr_writes=0 ipset_writes=0 iptables_restores=0 errors=0" {
		t.Errorf("first sync after restart: %s, want all 0", m[1])
	}
	if after := ipvsadm(t); after != before {
		t.Errorf("the restart changed the IPVS table:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	name, err := conn.Ask()
	if err != nil || name != conn.First {
		t.Errorf("the established connection after the restart answered %q, %v; want %q", name, err, conn.First)
	}
}

// Drift is repaired within a sync period: a flushed IPVS table and a removed VIP come back.
func TestDriftIsRepaired(t *testing.T) {
	dir := setupNode(t)
	backends(t, "dr", 7, 1)
	cli := client(t, "drc", "10.244.9.8")
	writeManifests(t, dir, "svc.yaml",
		serviceYAML(svcOpts{name: "web", clusterIP: "10.96.70.1", port: 80, targetPort: 8080}),
		sliceYAML("web", "web-1", "TCP", 8080, "", eps("10.244.7.11")...))
	p := startProxy(t, dir)
	eventually(t, firstSync, "the virtual server", func() bool { return realServers(vsBlock(t, "TCP", "10.96.70.1:80")) == 1 })
	p.waitLog(`msg="sync done" full=true`) // the IPVS part of the first sync may end before the rest

	if out, err := exec.Command("ipvsadm", "-C").CombinedOutput(); err != nil {
		t.Fatalf("ipvsadm -C: %v %s", err, out)
	}
	// Meanwhile someone else adds a virtual server on an address that is not on kube-ipvs0:
	// the repair must leave it alone.
	if out, err := exec.Command("ipvsadm", "-A", "-t", "192.0.2.77:80", "-s", "wlc").CombinedOutput(); err != nil {
		t.Fatalf("ipvsadm -A: %v %s", err, out)
	}
	if out, err := exec.Command("ip", "addr", "del", "10.96.70.1/32", "dev", "kube-ipvs0").CombinedOutput(); err != nil {
		t.Fatalf("ip addr del: %v %s", err, out)
	}
	eventually(t, 6*time.Second, "the flushed virtual server and the removed VIP to come back (sync period 2s)", func() bool {
		return realServers(vsBlock(t, "TCP", "10.96.70.1:80")) == 1 && dummyAddrs(t)["10.96.70.1"]
	})
	if got := ask(t, cli, "10.96.70.1:80", 1); got["dr1"] != 1 {
		t.Errorf("after the repair: %v", got)
	}
	if !strings.HasPrefix(vsBlock(t, "TCP", "192.0.2.77:80"), "TCP  192.0.2.77:80 wlc") {
		t.Errorf("a virtual server the proxy does not own was changed:\n%s", ipvsadm(t))
	}
}

// --once syncs and exits 0; a kernel object it must not touch makes it exit 1. A malformed
// manifest is named in the log and the valid objects still apply.
func TestOnceAndMalformedManifests(t *testing.T) {
	dir := setupNode(t)
	writeManifests(t, dir, "svc.yaml",
		serviceYAML(svcOpts{name: "web", clusterIP: "10.96.80.1", port: 80, targetPort: 8080}),
		sliceYAML("web", "web-1", "TCP", 8080, "", eps("10.244.8.11")...))
	writeManifests(t, dir, "broken.yaml", "apiVersion: v1\nkind: Service\nmetadata: {name: broken, namespace: e2e}\nspec:\n  ports: [{port: notanumber}]\n")
	out, err := exec.Command(binary, "run", "--once", "--manifests", dir, "--hostname-override", nodeName).CombinedOutput()
	if err != nil {
		t.Fatalf("run --once: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "broken.yaml") || !strings.Contains(string(out), "Service e2e/broken") {
		t.Errorf("the log does not name the broken file and object:\n%s", out)
	}
	if realServers(vsBlock(t, "TCP", "10.96.80.1:80")) != 1 {
		t.Errorf("--once did not program the valid Service:\n%s", ipvsadm(t))
	}

	// A veth already named like the dummy interface is not ours: exit 1, and it is untouched.
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "notours0"}, PeerName: "notours1"}
	if err := netlink.LinkAdd(veth); err != nil {
		t.Fatal(err)
	}
	defer netlink.LinkDel(veth)
	cmd := exec.Command(binary, "run", "--once", "--manifests", dir, "--hostname-override", nodeName, "--dummy-interface", "notours0")
	out, err = cmd.CombinedOutput()
	if code := cmd.ProcessState.ExitCode(); code != 1 {
		t.Errorf("run --once with a foreign link as dummy interface exited %d (%v), want 1:\n%s", code, err, out)
	}
	if l, err := netlink.LinkByName("notours0"); err != nil || l.Type() != "veth" {
		t.Errorf("the foreign link was changed: %v %v", l, err)
	}
}

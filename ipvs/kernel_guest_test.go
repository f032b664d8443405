//go:build guest

package ipvs

import (
	"errors"
	"net/netip"
	"os/exec"
	"regexp"
	"testing"

	"github.com/kube-ipvs/kube-ipvs/model"
	"github.com/kube-ipvs/kube-ipvs/test/guestutil"
)

func allOwned(model.VSKey) bool { return true }

// twoBackendsBehindAVIP makes, with forwarding on, two pods serving TCP 8080 (answering
// "srv1" and "srv2") at 10.244.<net>.1 and .2 and a client pod at .20, all named after
// name, and binds vip to a link of its own; it returns the client and vip's port 80.
func twoBackendsBehindAVIP(t *testing.T, name string, net byte, vip netip.Addr) (*guestutil.Pod, netip.AddrPort) {
	t.Helper()
	guestutil.WriteSysctl(t, "net.ipv4.ip_forward", "1")
	pod := func(suffix string, host byte) *guestutil.Pod {
		return guestutil.NewPod(t, name+suffix, netip.AddrFrom4([4]byte{10, 244, net, host}))
	}
	srv1, srv2, cli := pod("1", 1), pod("2", 2), pod("c", 20)
	srv1.ServeTCP(t, 8080, "srv1")
	srv2.ServeTCP(t, 8080, "srv2")
	vipLink(t, "kt-"+name, vip)
	return cli, netip.AddrPortFrom(vip, 80)
}

func TestGuestCreateAndReadBack(t *testing.T) {
	k := newKernel(t)
	r := NewReconciler(k)
	a := vs(key("10.97.0.1:80", model.TCP), "wrr", "10.244.20.1:8080", 1, "10.244.20.2:8080", 3)
	b := withSpec(vs(key("[fd00:97::1]:443", model.TCP), "sh", "[fd00:244:20::1]:8443", 2),
		model.VSSpec{Scheduler: "sh", Flags: model.FlagSchedFallbk | model.FlagSchedPort | model.FlagPersistent, Timeout: 600})
	c := vs(key("10.97.0.1:53", model.UDP), "rr", "10.244.20.1:53", 1)
	deleteAtEnd(t, k, a.Key, b.Key, c.Key)

	expectClean(t, r.Apply(changes(a, b, c)), 7)
	for _, want := range []*model.VirtualServer{a, b, c} {
		mustEqual(t, k, want) // HASHED, which the kernel adds, is not reported
	}
	all := listed(t, k)
	for _, want := range []*model.VirtualServer{a, b, c} {
		if got := all[want.Key]; got == nil || !got.Equal(want) {
			t.Errorf("dump has %v, want %v", got, want)
		}
	}

	out := ipvsadm(t, "-Ln")
	t.Logf("ipvsadm -Ln:\n%s", out)
	for _, re := range []string{
		`TCP\s+10\.97\.0\.1:80 wrr`,
		`->\s+10\.244\.20\.1:8080\s+Masq\s+1\s`,
		`->\s+10\.244\.20\.2:8080\s+Masq\s+3\s`,
		`TCP\s+\[fd00:97::1\]:443 sh .*persistent 600`,
		`UDP\s+10\.97\.0\.1:53 rr`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("ipvsadm -Ln does not match %q", re)
		}
	}

	expectClean(t, r.Apply(map[model.VSKey]*model.VirtualServer{a.Key: nil, b.Key: nil, c.Key: nil}), 3)
	for _, key := range []model.VSKey{a.Key, b.Key, c.Key} {
		if _, err := ReadVirtualServer(k, key); !errors.Is(err, ErrNotFound) {
			t.Errorf("after delete, get %s: %v, want ErrNotFound", key, err)
		}
	}
}

// Changing the scheduler, flags and persistence of a virtual server is an in-place update: a
// TCP connection through it stays open and keeps working.
func TestGuestUpdateServiceInPlaceKeepsConnections(t *testing.T) {
	k := newKernel(t)
	cli, target := twoBackendsBehindAVIP(t, "upd", 21, netip.MustParseAddr("10.97.1.1"))

	r := NewReconciler(k)
	base := vs(key(target.String(), model.TCP), "rr", "10.244.21.1:8080", 1, "10.244.21.2:8080", 1)
	deleteAtEnd(t, k, base.Key)
	expectClean(t, r.Apply(changes(base)), 3)

	conn, err := cli.DialTCP(target)
	if err != nil {
		t.Fatalf("connect from %s to %s: %v", cli.Name, target, err)
	}
	t.Cleanup(func() { conn.Close() })
	backend := conn.First
	if backend != "srv1" && backend != "srv2" {
		t.Fatalf("greeting %q, want srv1 or srv2", backend)
	}
	if n := vsConns(t, target, 1); n != 1 {
		t.Fatalf("virtual server counted %d connections, want 1", n)
	}
	real := netip.MustParseAddrPort(map[string]string{"srv1": "10.244.21.1:8080", "srv2": "10.244.21.2:8080"}[backend])

	for i, spec := range []model.VSSpec{
		{Scheduler: "sh", Flags: model.FlagSchedFallbk | model.FlagSchedPort | model.FlagPersistent, Timeout: 300},
		{Scheduler: "rr"}, // and back: the flags are cleared as well as set
	} {
		want := withSpec(base, spec)
		expectClean(t, r.Apply(changes(want)), 1)
		mustEqual(t, k, want)
		t.Logf("after update %d:\n%s", i, ipvsadm(t, "-Ln"))
		got, err := conn.Ask()
		if err != nil {
			t.Fatalf("the open connection broke after update %d (%s): %v", i, spec.Scheduler, err)
		}
		if got != backend {
			t.Errorf("after update %d the open connection answered %q, want %s", i, got, backend)
		}
		// The counters survived: neither the virtual server nor its real servers were
		// re-created.
		if n := vsConnsNow(t, target); n != 1 {
			t.Errorf("after update %d the virtual server counted %d connections, want still 1", i, n)
		}
		if n := activeConns(t, target, real); n != 1 {
			t.Errorf("after update %d real server %s has %d active connections, want 1", i, real, n)
		}
	}
	if out := ipvsadm(t, "-Ln"); !regexp.MustCompile(`TCP\s+10\.97\.1\.1:80 rr\s*\n`).MatchString(out) {
		t.Errorf("after clearing, ipvsadm still shows flags or persistence:\n%s", out)
	}
	// New connections work too.
	if got, err := cli.AskTCP(target); err != nil || (got != "srv1" && got != "srv2") {
		t.Errorf("new connection: %q, %v", got, err)
	}
}

func TestGuestResyncRestoresAfterFlush(t *testing.T) {
	k := newKernel(t)
	r := NewReconciler(k)
	desired := changes(
		vs(key("10.97.2.1:80", model.TCP), "rr", "10.244.22.1:80", 1, "10.244.22.2:80", 2),
		withSpec(vs(key("10.97.2.1:53", model.UDP), "sh", "10.244.22.1:53", 1),
			model.VSSpec{Scheduler: "sh", Flags: model.FlagSchedFallbk}),
		vs(key("[fd00:97:2::1]:80", model.TCP), "mh", "[fd00:244:22::1]:80", 1),
	)
	owned := func(k model.VSKey) bool {
		return netip.MustParsePrefix("10.97.2.0/24").Contains(k.Addr) || netip.MustParsePrefix("fd00:97:2::/64").Contains(k.Addr)
	}
	for key := range desired {
		deleteAtEnd(t, k, key)
	}
	expectClean(t, r.Apply(desired), 7)

	ipvsadm(t, "-C")
	if n := len(listed(t, k)); n != 0 {
		t.Fatalf("%d virtual servers after ipvsadm -C", n)
	}
	expectClean(t, resync(r, desired, owned), 7)
	got := listed(t, k)
	if len(got) != len(desired) {
		t.Errorf("kernel has %d virtual servers, want %d", len(got), len(desired))
	}
	for key, want := range desired {
		if !want.Equal(got[key]) {
			t.Errorf("after resync kernel has %v, want %v", got[key], want)
		}
	}

	// An owned leftover goes; a foreign virtual server stays.
	ipvsadm(t, "-A", "-t", "10.97.2.99:80", "-s", "rr")
	ipvsadm(t, "-A", "-t", "192.0.2.50:80", "-s", "wlc")
	ipvsadm(t, "-a", "-t", "192.0.2.50:80", "-r", "192.0.2.51:80", "-m")
	t.Cleanup(func() { _ = exec.Command("ipvsadm", "-D", "-t", "192.0.2.50:80").Run() })
	expectClean(t, resync(r, desired, owned), 1)
	got = listed(t, k)
	if _, ok := got[key("10.97.2.99:80", model.TCP)]; ok {
		t.Error("owned leftover survived the resync")
	}
	foreign := got[key("192.0.2.50:80", model.TCP)]
	if want := vs(key("192.0.2.50:80", model.TCP), "wlc", "192.0.2.51:80", 1); !want.Equal(foreign) {
		t.Errorf("foreign virtual server is %v, want %v", foreign, want)
	}
}

// A proxy that restarts adopts the kernel's state without writing, and a no-op Apply writes
// nothing either.
func TestGuestNoOpApplyAndMatchingResyncWriteNothing(t *testing.T) {
	k := newKernel(t)
	desired := changes(
		withSpec(vs(key("10.97.3.1:80", model.TCP), "sh", "10.244.23.1:80", 1, "10.244.23.2:80", 5),
			model.VSSpec{Scheduler: "sh", Flags: model.FlagSchedPort | model.FlagPersistent, Timeout: 10800}),
		vs(key("[fd00:97:3::1]:53", model.UDP), "lc", "[fd00:244:23::1]:53", 1),
		vs(key("10.97.3.1:8443", model.SCTP), "rr", "10.244.23.1:8443", 1),
	)
	for key := range desired {
		deleteAtEnd(t, k, key)
	}
	r1 := NewReconciler(k)
	expectClean(t, r1.Apply(desired), 7)
	expectClean(t, r1.Apply(desired), 0)
	if r1.Writes() != 7 {
		t.Errorf("Writes() = %d after a no-op Apply, want 7", r1.Writes())
	}

	k2 := newKernel(t)
	r2 := NewReconciler(k2)
	expectClean(t, resync(r2, desired, allOwned), 0)
	expectClean(t, r2.Apply(desired), 0)
	if r2.Writes() != 0 {
		t.Errorf("the adopting reconciler wrote %d times", r2.Writes())
	}
}

func TestGuestSchedulerUnavailable(t *testing.T) {
	k := newKernel(t)
	r := NewReconciler(k)
	a := vs(key("10.97.4.1:80", model.TCP), "nosuch", "10.244.24.1:80", 1)
	deleteAtEnd(t, k, a.Key)

	var se *SchedulerUnavailableError
	res := r.Apply(changes(a))
	if !errors.As(res.Errors[a.Key], &se) || se.Scheduler != "nosuch" {
		t.Fatalf("create with scheduler nosuch: %v, want SchedulerUnavailableError", res.Errors)
	}
	if _, err := ReadVirtualServer(k, a.Key); !errors.Is(err, ErrNotFound) {
		t.Errorf("the virtual server exists after the failed create: %v", err)
	}

	ok := withSpec(a, model.VSSpec{Scheduler: "rr"})
	expectClean(t, r.Apply(changes(ok)), 2)
	res = r.Apply(changes(a))
	if !errors.As(res.Errors[a.Key], &se) || se.Scheduler != "nosuch" {
		t.Fatalf("update to scheduler nosuch: %v, want SchedulerUnavailableError", res.Errors)
	}
	mustEqual(t, k, ok)
	if got, _ := r.Applied(a.Key); !got.Equal(ok) {
		t.Errorf("cache after the failed update: %v", got)
	}
}

func TestGuestIPv6TrafficThroughVirtualServer(t *testing.T) {
	k := newKernel(t)
	guestutil.WriteSysctl(t, "net.ipv4.ip_forward", "1")
	guestutil.WriteSysctl(t, "net.ipv6.conf.all.forwarding", "1")
	s1 := guestutil.NewPod(t, "v6s1", netip.MustParseAddr("10.244.26.1"), netip.MustParseAddr("fd00:244:26::1"))
	s2 := guestutil.NewPod(t, "v6s2", netip.MustParseAddr("10.244.26.2"), netip.MustParseAddr("fd00:244:26::2"))
	cli := guestutil.NewPod(t, "v6c", netip.MustParseAddr("10.244.26.20"), netip.MustParseAddr("fd00:244:26::20"))
	s1.ServeTCP(t, 8080, "v6s1")
	s2.ServeTCP(t, 8080, "v6s2")
	vip := netip.MustParseAddr("fd00:97:6::1")
	vipLink(t, "kt-v6", vip)

	r := NewReconciler(k)
	a := vs(key("[fd00:97:6::1]:80", model.TCP), "rr", "[fd00:244:26::1]:8080", 1, "[fd00:244:26::2]:8080", 1)
	deleteAtEnd(t, k, a.Key)
	expectClean(t, r.Apply(changes(a)), 3)

	got := map[string]int{}
	for i := 0; i < 4; i++ {
		name, err := cli.AskTCP(netip.AddrPortFrom(vip, 80))
		if err != nil {
			t.Fatalf("request %d to [%s]:80: %v", i, vip, err)
		}
		got[name]++
	}
	if got["v6s1"] != 2 || got["v6s2"] != 2 {
		t.Errorf("answers %v, want 2 from each IPv6 real server", got)
	}
}

func TestGuestUDPTrafficThroughVirtualServer(t *testing.T) {
	k := newKernel(t)
	guestutil.WriteSysctl(t, "net.ipv4.ip_forward", "1")
	s1 := guestutil.NewPod(t, "udp1", netip.MustParseAddr("10.244.27.1"))
	s2 := guestutil.NewPod(t, "udp2", netip.MustParseAddr("10.244.27.2"))
	cli := guestutil.NewPod(t, "udpc", netip.MustParseAddr("10.244.27.20"))
	n1 := s1.ServeUDP(t, 5353, "udp1")
	n2 := s2.ServeUDP(t, 5353, "udp2")
	vip := netip.MustParseAddr("10.97.7.1")
	vipLink(t, "kt-udp", vip)

	r := NewReconciler(k)
	a := vs(key("10.97.7.1:53", model.UDP), "rr", "10.244.27.1:5353", 1, "10.244.27.2:5353", 1)
	deleteAtEnd(t, k, a.Key)
	expectClean(t, r.Apply(changes(a)), 3)

	got := map[string]int{}
	for i := 0; i < 4; i++ {
		name, err := cli.AskUDP(netip.AddrPortFrom(vip, 53))
		if err != nil {
			t.Fatalf("datagram %d to %s:53: %v", i, vip, err)
		}
		got[name]++
	}
	if got["udp1"] != 2 || got["udp2"] != 2 || n1.Served() != 2 || n2.Served() != 2 {
		t.Errorf("answers %v (served %d, %d), want 2 from each real server", got, n1.Served(), n2.Served())
	}
}

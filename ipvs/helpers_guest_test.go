//go:build guest

package ipvs

import (
	"errors"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/kube-ipvs/kube-ipvs/model"
	"github.com/kube-ipvs/kube-ipvs/test/guestutil"
	"github.com/kube-ipvs/kube-ipvs/test/netnstest"
)

// newKernel opens the real IPVS netlink interface; the test fails outside the guest.
func newKernel(t *testing.T) Kernel {
	t.Helper()
	guestutil.RequireGuest(t)
	k, err := NewKernel()
	if err != nil {
		t.Fatalf("NewKernel: %v", err)
	}
	t.Cleanup(func() { k.(interface{ Close() error }).Close() })
	return k
}

// deleteAtEnd removes the given virtual servers when the test ends, whatever happened.
func deleteAtEnd(t *testing.T, k Kernel, keys ...model.VSKey) {
	t.Cleanup(func() {
		for _, key := range keys {
			if err := k.DelService(key); err != nil && !errors.Is(err, ErrNotFound) {
				t.Errorf("cleanup: %v", err)
			}
		}
	})
}

// vipLink creates a dummy link (down, as kube-ipvs0 is) holding the given VIPs, so the node
// accepts traffic to them as local; it is deleted when the test ends.
func vipLink(t *testing.T, name string, vips ...netip.Addr) {
	t.Helper()
	if err := netlink.LinkAdd(&netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Name: name}}); err != nil {
		t.Fatalf("create dummy link %s: %v", name, err)
	}
	link, err := netlink.LinkByName(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = netlink.LinkDel(link) })
	for _, v := range vips {
		a := &netlink.Addr{IPNet: &net.IPNet{IP: v.AsSlice(), Mask: net.CIDRMask(v.BitLen(), v.BitLen())}}
		if v.Is6() {
			a.Flags = unix.IFA_F_NODAD
		}
		if err := netlink.AddrAdd(link, a); err != nil {
			t.Fatalf("bind %s to %s: %v", v, name, err)
		}
	}
}

// ipvsadm runs the tool users debug with and returns its output.
func ipvsadm(t *testing.T, args ...string) string {
	t.Helper()
	return netnstest.Run(t, "ipvsadm", args...)
}

// vsConns returns the cumulative connection count ipvsadm --stats shows for a TCP virtual
// server: a counter that survives an in-place update and restarts at 0 when a virtual server
// is re-created. The kernel folds its per-CPU counters into it every 2 s, so it waits up to
// 8 s for the count to reach want.
func vsConns(t *testing.T, vip netip.AddrPort, want int) int {
	t.Helper()
	deadline := time.Now().Add(8 * time.Second)
	for {
		n := vsConnsNow(t, vip)
		if n == want || time.Now().After(deadline) {
			return n
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func vsConnsNow(t *testing.T, vip netip.AddrPort) int {
	t.Helper()
	out := ipvsadm(t, "-Ln", "--stats", "--exact", "-t", vip.String())
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) >= 3 && f[0] == "TCP" && f[1] == vip.String() {
			n, err := strconv.Atoi(f[2])
			if err != nil {
				t.Fatalf("conns of %s in %q: %v", vip, line, err)
			}
			return n
		}
	}
	t.Fatalf("ipvsadm --stats does not show %s:\n%s", vip, out)
	return 0
}

// activeConns returns the ActiveConn column of one real server of a TCP virtual server.
func activeConns(t *testing.T, vip netip.AddrPort, real netip.AddrPort) int {
	t.Helper()
	out := ipvsadm(t, "-Ln", "-t", vip.String())
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) >= 6 && f[0] == "->" && f[1] == real.String() {
			n, err := strconv.Atoi(f[4])
			if err != nil {
				t.Fatalf("active connections in %q: %v", line, err)
			}
			return n
		}
	}
	t.Fatalf("ipvsadm does not show real server %s of %s:\n%s", real, vip, out)
	return 0
}

func mustEqual(t *testing.T, k Kernel, want *model.VirtualServer) {
	t.Helper()
	got, err := ReadVirtualServer(k, want.Key)
	if err != nil {
		t.Fatalf("read back %s: %v", want.Key, err)
	}
	if !got.Equal(want) {
		t.Fatalf("kernel has\n%s\nwant\n%s", got, want)
	}
}

func listed(t *testing.T, k Kernel) map[model.VSKey]*model.VirtualServer {
	t.Helper()
	vses, err := ReadAll(k)
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	m := map[model.VSKey]*model.VirtualServer{}
	for _, v := range vses {
		m[v.Key] = v
	}
	return m
}

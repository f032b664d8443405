//go:build guest

package guestbench

import (
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"

	"github.com/moby/ipvs"
	"golang.org/x/sys/unix"

	"github.com/kube-ipvs/kube-ipvs/test/guestutil"
	"github.com/kube-ipvs/kube-ipvs/test/netnstest"
)

// kernelSchedulers lists the IPVS schedulers the running kernel ships as modules
// (ip_vs_<name>.ko), leaving out the application helpers that are not schedulers.
func kernelSchedulers(t *testing.T) []string {
	t.Helper()
	var uts unix.Utsname
	if err := unix.Uname(&uts); err != nil {
		t.Fatal(err)
	}
	release := unix.ByteSliceToString(uts.Release[:])
	files, err := filepath.Glob(filepath.Join("/lib/modules", release, "kernel/net/netfilter/ipvs/ip_vs_*.ko*"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		name := strings.TrimPrefix(strings.SplitN(filepath.Base(f), ".", 2)[0], "ip_vs_")
		switch name {
		case "ftp", "pe_sip": // application helper and persistence engine, not schedulers
			continue
		}
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

func TestEverySchedulerCreatesAVirtualServer(t *testing.T) {
	guestutil.RequireGuest(t)
	scheds := kernelSchedulers(t)
	t.Logf("kernel schedulers: %v", scheds)
	for _, must := range []string{"rr", "wrr", "lc", "wlc", "lblc", "lblcr", "dh", "sh", "sed", "nq", "fo", "ovf", "mh"} {
		if !contains(scheds, must) {
			t.Errorf("scheduler %s is missing from the guest's modules", must)
		}
	}

	h, err := ipvs.New("")
	if err != nil {
		t.Fatalf("IPVS netlink handle: %v", err)
	}
	defer h.Close()

	for i, s := range scheds {
		svc := &ipvs.Service{
			AddressFamily: syscall.AF_INET,
			Protocol:      syscall.IPPROTO_TCP,
			Address:       net.IPv4(198, 51, 100, byte(10+i)),
			Port:          80,
			SchedName:     s,
			Netmask:       0xffffffff,
		}
		if err := h.NewService(svc); err != nil {
			t.Errorf("create a virtual server with scheduler %s: %v", s, err)
			continue
		}
		got, err := h.GetService(svc)
		if err != nil {
			t.Errorf("read back the %s virtual server: %v", s, err)
		} else if got.SchedName != s || !got.Address.Equal(svc.Address) || got.Port != 80 {
			t.Errorf("read back %s:%d sched %q, want %s:80 sched %q", got.Address, got.Port, got.SchedName, svc.Address, s)
		}
		if err := h.DelService(svc); err != nil {
			t.Errorf("delete the %s virtual server: %v", s, err)
		}
	}
	left, err := h.GetServices()
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 0 {
		t.Errorf("%d virtual servers left after deleting them all", len(left))
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// The tools users debug with must be in the guest and see the kernel's IPVS table.
func TestIpvsadmSeesNetlinkVirtualServer(t *testing.T) {
	guestutil.RequireGuest(t)
	h, err := ipvs.New("")
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	svc := &ipvs.Service{AddressFamily: syscall.AF_INET, Protocol: syscall.IPPROTO_UDP,
		Address: net.IPv4(198, 51, 100, 200), Port: 53, SchedName: "sh", Netmask: 0xffffffff}
	if err := h.NewService(svc); err != nil {
		t.Fatal(err)
	}
	defer h.DelService(svc)
	out := netnstest.Run(t, "ipvsadm", "-Ln")
	if !strings.Contains(out, "UDP  198.51.100.200:53 sh") {
		t.Errorf("ipvsadm -Ln does not show the virtual server:\n%s", out)
	}
}

func init() {
	// Tests here print kernel identity once, so the log shows they ran in the guest.
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		os.Stdout.WriteString("guestbench: running on kernel " + strings.TrimSpace(string(b)) + "\n")
	}
}

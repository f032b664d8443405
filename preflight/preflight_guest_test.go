//go:build guest

package preflight

import (
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/kube-ipvs/kube-ipvs/test/guestutil"
	"github.com/kube-ipvs/kube-ipvs/test/netnstest"
)

// sh runs a shell command line and returns its output, failing the test when it fails.
func sh(t *testing.T, cmd string) string {
	t.Helper()
	return netnstest.Run(t, "bash", "-c", cmd)
}

// noLeftovers fails if the probes left their virtual server or dummy link behind.
func noLeftovers(t *testing.T) {
	t.Helper()
	if out := sh(t, "ipvsadm -Ln"); strings.Contains(out, "198.51.100.254:1") {
		t.Errorf("the probe virtual server is left over:\n%s", out)
	}
	if _, err := netlink.LinkByName(ProbeLinkName); err == nil {
		t.Errorf("the probe dummy link %s is left over", ProbeLinkName)
	}
}

func TestGuestPreflightPasses(t *testing.T) {
	guestutil.RequireGuest(t)
	scan := &ServiceScan{Source: "test", Services: 3, Schedulers: map[string][]string{
		"sh": {"a/web"}, "mh": {"a/db"}, "twos": {"a/new"},
	}}
	r := Run(context.Background(), Options{DefaultScheduler: "wrr", Services: scan})
	for _, c := range r.Checks {
		t.Logf("%-45s %-8s %s | %s", c.Name, c.Status, c.Detail, c.Fix)
	}
	if !r.IPVSUsable {
		t.Fatalf("IPVS not usable in the guest: %+v", r.Blocking())
	}
	// twos came with Linux 6.7: on older kernels (Debian's 5.10 and 6.1) the annotation-only
	// scheduler fails, explained by the kernel release, and IPVS stays usable; from 6.7 on
	// (Debian's 6.12) it works like any other.
	hasTwos := guestutil.KernelAtLeast(t, 6, 7)
	for _, c := range r.Checks {
		switch {
		case c.Name == "kernel":
			if c.Status != Info || !strings.Contains(c.Detail, guestutil.KernelRelease(t)) {
				t.Errorf("kernel row %+v does not name the running release", c)
			}
		case strings.HasSuffix(c.Name, "twos") && !hasTwos:
			if c.Status != Failed {
				t.Errorf("%s: %s, want failed on kernel %s", c.Name, c.Status, guestutil.KernelRelease(t))
			}
		case c.Status != OK:
			t.Errorf("%s: %s (%s), want ok", c.Name, c.Status, c.Detail)
		}
	}
	kernelRow, _ := r.Find("kernel")
	if predates := strings.Contains(kernelRow.Detail, "predates: twos"); predates == hasTwos {
		t.Errorf("kernel row %q: says twos is missing = %v on kernel %s", kernelRow.Detail, predates, guestutil.KernelRelease(t))
	}
	if c, _ := r.Find("module ip_vs_twos"); !hasTwos && (!strings.Contains(c.Fix, "exists from Linux 6.7 (CONFIG_IP_VS_TWOS)") || !strings.Contains(c.Detail, "no module file")) {
		t.Errorf("module ip_vs_twos row %+v does not explain the missing module", c)
	}
	if c, _ := r.Find("ipvs probe twos"); hasTwos && c.Status != OK {
		t.Errorf("ipvs probe twos on kernel %s: %+v", guestutil.KernelRelease(t), c)
	}
	for _, name := range []string{"ipvs probe wrr", "ipvs probe sh", "ipvs probe mh"} {
		if c, ok := r.Find(name); !ok || c.Status != OK {
			t.Errorf("%s: %+v", name, c)
		}
	}
	noLeftovers(t)
}

// TestGuestProbesCleanUpLeftovers: a probe virtual server and dummy link left by an
// interrupted run are removed, and the probes still pass.
func TestGuestProbesCleanUpLeftovers(t *testing.T) {
	guestutil.RequireGuest(t)
	sh(t, "ipvsadm -A -t 198.51.100.254:1 -s lc && ip link add "+ProbeLinkName+" type dummy")
	if err := probeVirtualServer("rr"); err != nil {
		t.Errorf("probe virtual server over a leftover: %v", err)
	}
	if err := dummyLink(ProbeLinkName); err != nil {
		t.Errorf("dummy link over a leftover: %v", err)
	}
	noLeftovers(t)

	// A scheduler the kernel lacks fails, and nothing is left behind; twos exists from 6.7.
	err := probeVirtualServer("twos")
	if hasTwos := guestutil.KernelAtLeast(t, 6, 7); hasTwos && err != nil {
		t.Errorf("probe with twos on kernel %s (6.7 or newer has it): %v", guestutil.KernelRelease(t), err)
	} else if !hasTwos && (err == nil || !strings.Contains(err.Error(), "twos")) {
		t.Errorf("probe with a scheduler the kernel lacks: %v", err)
	}
	noLeftovers(t)

	// A link of that name that is not a dummy is not ours: it stays.
	sh(t, "ip link add "+ProbeLinkName+" type veth peer name kipvs-probe1")
	defer sh(t, "ip link del "+ProbeLinkName)
	if err := dummyLink(ProbeLinkName); err == nil || !strings.Contains(err.Error(), "not ours") {
		t.Errorf("dummy probe over a veth: %v", err)
	}
	if _, err := netlink.LinkByName(ProbeLinkName); err != nil {
		t.Errorf("the veth was removed: %v", err)
	}
}

// TestGuestCommand runs the binary as an init container would.
func TestGuestCommand(t *testing.T) {
	guestutil.RequireGuest(t)
	bin := "/usr/local/bin/kube-ipvs"
	out, err := exec.Command(bin, "preflight", "-o", "json").Output()
	if err != nil {
		t.Fatalf("kube-ipvs preflight -o json: %v\n%s", err, out)
	}
	var rep struct {
		IPVSUsable *bool `json:"ipvsUsable"`
		Checks     []map[string]string
	}
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if rep.IPVSUsable == nil || !*rep.IPVSUsable || len(rep.Checks) < 20 {
		t.Errorf("report: %s", out)
	}
	table, err := exec.Command(bin, "preflight").CombinedOutput()
	if err != nil || !strings.HasSuffix(string(table), "IPVS mode: usable\n") {
		t.Errorf("kube-ipvs preflight: %v\n%s", err, table)
	}
	noLeftovers(t)
}

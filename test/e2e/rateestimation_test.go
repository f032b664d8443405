//go:build guest

package e2e

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kube-ipvs/kube-ipvs/sysctl"
	"github.com/kube-ipvs/kube-ipvs/test/guestutil"
)

const runEstimationFile = "/proc/sys/net/ipv4/vs/run_estimation"

// --ipvs-rate-estimation: the default leaves net.ipv4.vs.run_estimation as it was; on sets
// 1 and the rates ipvsadm --rate shows move with the traffic; off sets 0 and they stay put
// through more than two of the kernel's 2 s estimation rounds (so do the --stats counters,
// which the same rounds sum) while the traffic still balances and the real servers'
// connection counts, which the schedulers read, go on. A kernel without the setting (before 5.16: the 5.10
// guest) gets a loud error naming it and the kernel it needs, and the proxy runs on.
func TestRateEstimationSwitch(t *testing.T) {
	dir := setupNode(t)
	backs := backends(t, "re", 16, 2)
	cli := client(t, "rec", "10.244.9.61")
	const vip = "10.96.63.1:80"
	writeManifests(t, dir, "svc.yaml",
		serviceYAML(svcOpts{name: "re", clusterIP: "10.96.63.1", port: 80, targetPort: 8080}),
		sliceYAML("re", "re-1", "TCP", 8080, "", eps("10.244.16.11", "10.244.16.12")...))
	balanced := func() {
		t.Helper()
		got := ask(t, cli, vip, 4)
		for _, b := range backs {
			if got[b.Name] != 2 {
				t.Fatalf("round robin over 2 backends answered %v, want 2 each", got)
			}
		}
	}
	p := startProxy(t, dir) // the default: loads ip_vs, leaves the setting alone
	p.waitLog(`msg="sync done"`)
	if _, err := os.Stat(runEstimationFile); err != nil {
		if guestutil.KernelAtLeast(t, 5, 16) {
			t.Fatalf("kernel %s has no %s: %v", guestutil.KernelRelease(t), runEstimationFile, err)
		}
		p.stop()
		p = startProxy(t, dir, "--ipvs-rate-estimation=off")
		p.waitLog(`msg="setting a kernel parameter failed" err="sysctl ` + sysctl.RunEstimation + `=0 \([^)]*Linux 5\.16`)
		p.waitLog(`msg="sync done"`)
		balanced()
		return
	}
	t.Cleanup(func() { _ = os.WriteFile(runEstimationFile, []byte("1"), 0o644) })

	guestutil.WriteSysctl(t, sysctl.RunEstimation, "0")
	p.stop()
	p = startProxy(t, dir)
	p.waitLog(`msg="sync done"`)
	if v := readRunEstimation(t); v != "0" {
		t.Fatalf("the default changed run_estimation to %s", v)
	}
	if strings.Contains(p.Log(), sysctl.RunEstimation) {
		t.Errorf("the default logged the setting:\n%s", p.Log())
	}

	p.stop()
	p = startProxy(t, dir, "--ipvs-rate-estimation=on")
	p.waitLog(`msg="sysctl set" name=` + sysctl.RunEstimation + ` value=1`)
	p.waitLog(`msg="sync done"`)
	eventually(t, 20*time.Second, "a rate of "+vip+" above 0 with estimation on", func() bool {
		balanced()
		return vsRates(t, vip) != "0 0 0 0 0"
	})

	p.stop()
	p = startProxy(t, dir, "--ipvs-rate-estimation=off")
	p.waitLog(`msg="sysctl set" name=` + sysctl.RunEstimation + ` value=0`)
	p.waitLog(`msg="sync done"`)
	if v := readRunEstimation(t); v != "0" {
		t.Fatalf("off left run_estimation at %s", v)
	}
	rates, conns, held := vsRates(t, vip), vsConns(t, vip), realConns(t, vip)
	// Absence needs time: the estimator runs every 2 s, so 5 s of traffic is at least two
	// rounds in which it would have moved the rates. Hundreds of connections from one
	// client reuse source ports whose IPVS connection entries still linger, and such a
	// connection goes where its entry says, not to round robin's next: the traffic is
	// checked for reaching both backends, not for an exact 2 and 2 per round.
	answered := map[string]int{}
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); {
		for name, n := range ask(t, cli, vip, 4) {
			answered[name] += n
		}
		if now := vsRates(t, vip); now != rates {
			t.Fatalf("rates moved with estimation off: %q, then %q", rates, now)
		}
	}
	total := 0
	for _, n := range answered {
		total += n
	}
	for _, b := range backs {
		if answered[b.Name] < total/4 {
			t.Errorf("with estimation off the traffic was not balanced: %v", answered)
		}
	}
	// The same rounds sum the cumulative counters (ipvsadm --stats), so they stop too (6.1
	// and 6.12 alike); the real servers' connection counts, which the lc, wlc, sed and nq
	// schedulers read, go on.
	if after := vsConns(t, vip); after != conns {
		t.Errorf("connections counted %d, then %d with estimation off: is it off?", conns, after)
	}
	if after := realConns(t, vip); after < held+20 {
		t.Errorf("the real servers' active and inactive connections went from %d to %d over more than 20 new ones", held, after)
	}
}

// realConns sums the ActiveConn and InActConn columns of the virtual server's real servers
// (`ipvsadm -Ln`).
func realConns(t *testing.T, addrPort string) int {
	t.Helper()
	n := 0
	for _, line := range strings.Split(ipvsadm(t, "-t", addrPort), "\n") {
		if f := strings.Fields(line); len(f) == 6 && f[0] == "->" && f[1] != "RemoteAddress:Port" {
			n += atoi(t, f[4]) + atoi(t, f[5])
		}
	}
	return n
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("%q is not a count", s)
	}
	return n
}

func readRunEstimation(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(runEstimationFile)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// vsRates is the virtual server's line of `ipvsadm -Ln --rate`: CPS, InPPS, OutPPS, InBPS,
// OutBPS.
func vsRates(t *testing.T, addrPort string) string {
	t.Helper()
	return strings.Join(vsColumns(t, addrPort, "--rate"), " ")
}

// vsConns is the virtual server's connection counter (`ipvsadm -Ln --stats`).
func vsConns(t *testing.T, addrPort string) int {
	t.Helper()
	return atoi(t, vsColumns(t, addrPort, "--stats")[0])
}

func vsColumns(t *testing.T, addrPort, view string) []string {
	t.Helper()
	out := ipvsadm(t, view, "--exact", "-t", addrPort)
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) == 7 && f[0] == "TCP" && f[1] == addrPort {
			return f[2:]
		}
	}
	t.Fatalf("no line for %s in ipvsadm %s:\n%s", addrPort, view, out)
	return nil
}

//go:build guest

package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// busyCPUs keeps every CPU of the guest busy with spinning shells until the test ends, when
// they are killed by their own pids.
func busyCPUs(t *testing.T) {
	t.Helper()
	for range runtime.NumCPU() {
		cmd := exec.Command("sh", "-c", "while :; do :; done")
		if err := cmd.Start(); err != nil {
			t.Fatalf("start a spinner: %v", err)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		})
	}
}

// virtualServers counts the TCP virtual servers in `ipvsadm -Ln`.
func virtualServers(t *testing.T) int {
	return strings.Count(ipvsadm(t), "\nTCP  ")
}

// A SIGHUP reload that adds 2,000 Services with their EndpointSlices while the node's CPUs
// are busy: the proxy stays up (client-go's fake clientset, the source before, panicked
// with "channel full" when the informers fell behind), every Service reaches IPVS, and a
// reload that removes them returns IPVS to what it was.
func TestManifestReloadOfThousandsOnBusyCPUs(t *testing.T) {
	dir := setupNode(t)
	writeManifests(t, dir, "base.yaml", serviceYAML(svcOpts{name: "base", clusterIP: "10.96.40.1", port: 80, targetPort: 8080}),
		sliceYAML("base", "base-1", "TCP", 8080, "", eps("10.244.40.1")...))
	p := startProxy(t, dir)
	eventually(t, firstSync, "the base Service's virtual server", func() bool { return virtualServers(t) == 1 })
	before := ipvsadm(t)

	const n = 2000
	var docs []string
	for i := range n {
		name := fmt.Sprintf("bulk-%d", i)
		docs = append(docs, serviceYAML(svcOpts{name: name, clusterIP: fmt.Sprintf("10.100.%d.%d", i/250, i%250+1), port: 80, targetPort: 8080}),
			sliceYAML(name, name+"-1", "TCP", 8080, "", eps(fmt.Sprintf("10.244.%d.%d", 100+i/250, i%250+1))...))
	}
	busyCPUs(t)
	writeManifests(t, dir, "bulk.yaml", docs...)
	start := time.Now()
	p.reload()
	alive := func() bool { return p.cmd.Process.Signal(syscall.Signal(0)) == nil && p.cmd.ProcessState == nil }
	// The bounds are for a proxy that hangs: parsing 4,000 documents on CPUs shared with
	// spinners, in an emulated guest on a shared host, took from 12 s to over 45 s.
	eventually(t, 240*time.Second, fmt.Sprintf("%d virtual servers", n+1), func() bool {
		if !alive() {
			t.Fatalf("the proxy died during the reload:\n%s", p.Log())
		}
		return virtualServers(t) == n+1
	})
	t.Logf("%d Services in IPVS %s after the reload, CPUs busy", n, time.Since(start).Round(time.Millisecond))

	if err := os.Remove(filepath.Join(dir, "bulk.yaml")); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	p.reload()
	eventually(t, 120*time.Second, "IPVS as before the reloads", func() bool { return ipvsadm(t) == before })
	t.Logf("removed %s after the reload", time.Since(start).Round(time.Millisecond))
	if !alive() || strings.Contains(p.Log(), "panic") {
		t.Fatalf("the proxy did not survive the reloads:\n%s", p.Log())
	}
}

//go:build guest

package e2e

import (
	"errors"
	"io/fs"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// A clean stop leaves a handover (--handover-file) and the next start takes it: its first
// sync lists the services and reads back only what the handover does not hold as listed.
// A virtual server deleted while no proxy ran is created again at once; a real server
// removed meanwhile under an unchanged spec is what the handover hides, and the first repair
// cycle restores it. An established connection keeps working throughout, and the file is
// gone once taken.
func TestRestartWithAHandover(t *testing.T) {
	dir := setupNode(t)
	backends(t, "ho", 15, 2)
	cli := client(t, "hoc", "10.244.9.60")
	handover := filepath.Join(t.TempDir(), "ipvs-handover")
	writeManifests(t, dir, "svc.yaml",
		serviceYAML(svcOpts{name: "web", clusterIP: "10.96.62.1", port: 80, targetPort: 8080}),
		sliceYAML("web", "web-1", "TCP", 8080, "", eps("10.244.15.11", "10.244.15.12")...),
		serviceYAML(svcOpts{name: "other", clusterIP: "10.96.62.2", port: 80, targetPort: 8080}),
		sliceYAML("other", "other-1", "TCP", 8080, "", eps("10.244.15.11")...))
	p := startProxy(t, dir, "--handover-file", handover)
	eventually(t, firstSync, "the virtual servers", func() bool {
		return realServers(vsBlock(t, "TCP", "10.96.62.1:80")) == 2 && realServers(vsBlock(t, "TCP", "10.96.62.2:80")) == 1
	})
	conn, err := cli.DialTCP(netip.MustParseAddrPort("10.96.62.1:80"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	p.stop() // SIGTERM
	p.waitLog(`msg="handover written for the next start" file=\S+ virtual_servers=2`)
	if _, err := os.Stat(handover); err != nil {
		t.Fatalf("no handover after a clean stop: %v", err)
	}
	// While no proxy runs: one real server of web goes (its spec stays), and other's virtual
	// server goes.
	other := "10.244.15.11:8080"
	if conn.First == "ho1" {
		other = "10.244.15.12:8080" // keep the held connection's backend
	}
	for _, args := range [][]string{{"-d", "-t", "10.96.62.1:80", "-r", other}, {"-D", "-t", "10.96.62.2:80"}} {
		if out, err := exec.Command("ipvsadm", args...).CombinedOutput(); err != nil {
			t.Fatalf("ipvsadm %v: %v %s", args, err, out)
		}
	}

	p2 := startProxy(t, dir, "--handover-file", handover, "--sync-period", "3s")
	p2.waitLog(`msg="handover taken: [^"]*" file=\S+ virtual_servers=2`)
	m := p2.waitLog(`msg="sync done" full=true services=\d+ (ipvs_writes=\d+ addr_writes=\d+ ipset_writes=\d+ iptables_restores=\d+ errors=\d+)`)
	// other's virtual server and real server; web's lost real server is not seen yet.
	if m[1] != "ipvs_writes=2 addr_writes=0 ipset_writes=0 iptables_restores=0 errors=0" {
		t.Errorf("first sync with the handover: %s, want other's 2 IPVS writes alone", m[1])
	}
	if _, err := os.Stat(handover); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the handover is still there after the start took it (%v)", err)
	}
	if got := ask(t, cli, "10.96.62.2:80", 2); got["ho1"] != 2 {
		t.Errorf("other after the restart: %v, want ho1 twice", got)
	}
	eventually(t, 10*time.Second, "the first repair cycle to restore web's lost real server (sync period 3s)", func() bool {
		return realServers(vsBlock(t, "TCP", "10.96.62.1:80")) == 2
	})
	if got := ask(t, cli, "10.96.62.1:80", 4); got["ho1"] == 0 || got["ho2"] == 0 {
		t.Errorf("web after the repair: %v, want both backends", got)
	}
	if name, err := conn.Ask(); err != nil || name != conn.First {
		t.Errorf("the established connection after the restart answered %q, %v; want %q", name, err, conn.First)
	}
}

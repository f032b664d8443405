//go:build guest

package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kube-ipvs/kube-ipvs/test/guestutil"
)

// The capabilities deploy/daemonset.yaml gives the proxy container.
var proxyCaps = []uintptr{unix.CAP_NET_ADMIN, unix.CAP_NET_RAW, unix.CAP_SYS_RESOURCE}

// asContainer starts a process the way a container runtime starts the DaemonSet's proxy
// container (not privileged, capabilities dropped but proxyCaps): with /proc/sys and /sys
// mounted read-only and a bounding and inheritable set of proxyCaps, so that the process,
// root as in the container, gets exactly those capabilities at exec. The namespace and the
// capabilities are this one OS thread's: the goroutine never unlocks it, so the thread ends
// with it instead of going back to the runtime.
func asContainer(start func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		errc <- func() error {
			if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
				return fmt.Errorf("unshare: %w", err)
			}
			if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
				return fmt.Errorf("make / private: %w", err)
			}
			for _, p := range []string{"/proc/sys", "/sys"} {
				if err := unix.Mount(p, p, "", unix.MS_BIND, ""); err != nil {
					return fmt.Errorf("bind %s: %w", p, err)
				}
				if err := unix.Mount("", p, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
					return fmt.Errorf("remount %s read-only: %w", p, err)
				}
			}
			keep := uint64(0)
			for _, c := range proxyCaps {
				keep |= 1 << c
			}
			for c := uintptr(0); c < 64; c++ {
				if keep&(1<<c) == 0 {
					if err := unix.Prctl(unix.PR_CAPBSET_DROP, c, 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
						return fmt.Errorf("drop capability %d from the bounding set: %w", c, err)
					}
				}
			}
			hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
			var data [2]unix.CapUserData
			if err := unix.Capget(&hdr, &data[0]); err != nil {
				return fmt.Errorf("capget: %w", err)
			}
			data[0].Inheritable, data[1].Inheritable = uint32(keep), uint32(keep>>32)
			if err := unix.Capset(&hdr, &data[0]); err != nil {
				return fmt.Errorf("capset: %w", err)
			}
			return start()
		}()
	}()
	return <-errc
}

// procStatus reads one field of /proc/PID/status.
func procStatus(t *testing.T, pid int, field string) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("/proc/%d/status has no %s", pid, field)
	return ""
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// The DaemonSet's split, in the guest: `run --init-only` as root sets the conntrack limits
// and the sysctls; the proxy then runs as its container does (NET_ADMIN, NET_RAW and
// SYS_RESOURCE only, /proc/sys and /sys read-only), programs IPVS and carries a packet, with
// no more capabilities than those, oom_score_adj -999 and kube-proxy's JSON log lines. A
// sysctl it needs that is wrong and unwritable makes it refuse to start, naming the sysctl
// and --init-only.
func TestInitOnlyThenLeastPrivilege(t *testing.T) {
	dir := setupNode(t)
	backends(t, "lp", 37, 1)
	cli := client(t, "lpc", "10.244.9.37")
	writeManifests(t, dir, "svc.yaml",
		serviceYAML(svcOpts{name: "lp", clusterIP: "10.96.37.1", port: 80, targetPort: 8080}),
		sliceYAML("lp", "lp-1", "TCP", 8080, "", eps("10.244.37.11")...))
	cfg := filepath.Join(t.TempDir(), "kube-proxy.yaml")
	if err := os.WriteFile(cfg, []byte(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: ipvs
oomScoreAdj: -999
logging:
  format: json
conntrack:
  maxPerCore: 40000
  min: 150000
  tcpEstablishedTimeout: 2h
  tcpCloseWaitTimeout: 30m
  tcpBeLiberal: true
  udpTimeout: 45s
  udpStreamTimeout: 100s
`), 0o644); err != nil {
		t.Fatal(err)
	}
	const nf = "/proc/sys/net/netfilter/"
	// What a fresh node would have: the init step must change each of these.
	saved := map[string]string{}
	for _, n := range []string{"nf_conntrack_tcp_timeout_established", "nf_conntrack_tcp_timeout_close_wait", "nf_conntrack_tcp_be_liberal", "nf_conntrack_udp_timeout", "nf_conntrack_udp_timeout_stream"} {
		if b, err := os.ReadFile(nf + n); err == nil {
			saved[n] = strings.TrimSpace(string(b))
		}
	}
	t.Cleanup(func() {
		for n, v := range saved {
			_ = os.WriteFile(nf+n, []byte(v), 0o644)
		}
	})
	if _, err := os.Stat(nf + "nf_conntrack_max"); err == nil {
		guestutil.WriteSysctl(t, "net.netfilter.nf_conntrack_max", "1000")
		guestutil.WriteSysctl(t, "net.netfilter.nf_conntrack_tcp_be_liberal", "0")
	}

	out, err := exec.Command(binary, "run", "--init-only", "--config", cfg).CombinedOutput()
	if err != nil {
		t.Fatalf("run --init-only: %v\n%s", err, out)
	}
	cpus := runtime.NumCPU()
	wantMax := max(40000*cpus, 150000)
	for name, want := range map[string]string{
		"nf_conntrack_max": strconv.Itoa(wantMax), "nf_conntrack_tcp_timeout_established": "7200",
		"nf_conntrack_tcp_timeout_close_wait": "1800", "nf_conntrack_tcp_be_liberal": "1",
		"nf_conntrack_udp_timeout": "45", "nf_conntrack_udp_timeout_stream": "100",
	} {
		if got := readFile(t, nf+name); got != want {
			t.Errorf("after --init-only, %s = %s, want %s (%d CPUs)\n%s", name, got, want, cpus, out)
		}
	}
	if h, _ := strconv.Atoi(readFile(t, "/sys/module/nf_conntrack/parameters/hashsize")); h < wantMax/4 {
		t.Errorf("conntrack hashsize %d, want at least %d", h, wantMax/4)
	}
	if got := readFile(t, "/proc/sys/net/ipv4/vs/expire_nodest_conn"); got != "1" {
		t.Errorf("after --init-only, net.ipv4.vs.expire_nodest_conn = %s, want 1", got)
	}

	p := startProxyAs(t, nodeName, asContainer, dir, "--config", cfg)
	p.waitLog(`"msg":"sync done"`)
	pid := p.cmd.Process.Pid
	eff, err := strconv.ParseUint(procStatus(t, pid, "CapEff"), 16, 64)
	if err != nil {
		t.Fatal(err)
	}
	var want uint64
	for _, c := range proxyCaps {
		want |= 1 << c
	}
	if eff != want {
		t.Errorf("the proxy's CapEff is %#x, want exactly %#x (NET_ADMIN, NET_RAW, SYS_RESOURCE)", eff, want)
	}
	if got := readFile(t, fmt.Sprintf("/proc/%d/oom_score_adj", pid)); got != "-999" {
		t.Errorf("the proxy's oom_score_adj is %s, want -999", got)
	}
	eventually(t, 10*time.Second, "the virtual server with its real server", func() bool {
		return realServers(vsBlock(t, "TCP", "10.96.37.1:80")) == 1
	})
	if got := ask(t, cli, "10.96.37.1:80", 2); got["lp1"] != 2 {
		t.Errorf("through the Service: %v, want lp1 twice", got)
	}
	lines := 0
	for _, l := range strings.Split(strings.TrimSpace(p.Log()), "\n") {
		var m struct {
			TS  *float64 `json:"ts"`
			Msg *string  `json:"msg"`
		}
		if err := json.Unmarshal([]byte(l), &m); err != nil || m.TS == nil || m.Msg == nil {
			t.Errorf("not a kube-proxy JSON log line (ts, msg): %q (%v)", l, err)
		}
		lines++
	}
	p.stop()
	if lines < 3 {
		t.Errorf("only %d log lines", lines)
	}

	// The same container on a node whose tcpBeLiberal was reset: refused, naming it.
	guestutil.WriteSysctl(t, "net.netfilter.nf_conntrack_tcp_be_liberal", "0")
	ctx, cancel := context.WithTimeout(context.Background(), firstSync)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "run", "--config", cfg, "--manifests", dir, "--hostname-override", nodeName)
	var log strings.Builder
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := asContainer(cmd.Start); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("with a wrong read-only sysctl the proxy ended with %v, want exit status 1:\n%s", err, log.String())
	}
	if s := log.String(); !strings.Contains(s, "net.netfilter.nf_conntrack_tcp_be_liberal=1") || !strings.Contains(s, "now 0") ||
		!strings.Contains(s, "kube-ipvs run --init-only") {
		t.Errorf("the refusal does not name the sysctl, its value and --init-only:\n%s", s)
	}
}

package sysctl

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestForProxyByKernelVersion(t *testing.T) {
	has := func(s []Setting, name string) bool {
		for _, x := range s {
			if x.Name == name {
				return true
			}
		}
		return false
	}
	cases := []struct {
		release   string
		reuseZero bool
	}{
		{"3.10.0-1160.el7.x86_64", false},
		{"4.1.0", true},
		{"4.19.0-21-amd64", true},
		{"5.8.18", true},
		{"5.9.0", false},
		{"5.10.0-46-amd64", false},
		{"6.1.0-57-amd64", false},
		{"6.12.57+deb13-amd64", false},
		{"garbage", false},
	}
	for _, c := range cases {
		if got := has(ForProxy(c.release, Options{}), "net.ipv4.vs.conn_reuse_mode"); got != c.reuseZero {
			t.Errorf("%s: conn_reuse_mode set = %v, want %v", c.release, got, c.reuseZero)
		}
	}
	s := ForProxy("6.1.0", Options{StrictARP: true})
	if !has(s, "net.ipv4.conf.all.arp_ignore") || !has(s, "net.ipv4.conf.all.arp_announce") {
		t.Error("strict ARP settings missing")
	}
	if has(ForProxy("6.1.0", Options{}), "net.ipv4.conf.all.arp_ignore") {
		t.Error("arp_ignore set without --strict-arp")
	}
}

func TestApplyWritesOnlyWhatDiffersAndNamesFailures(t *testing.T) {
	Root = t.TempDir()
	defer func() { Root = "/proc/sys" }()
	mk := func(name, v string) {
		p := path(name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, []byte(v+"\n"), 0o644)
	}
	mk("net.ipv4.ip_forward", "1")
	mk("net.ipv4.vs.conntrack", "0")
	changed, err := Apply([]Setting{
		{Name: "net.ipv4.ip_forward", Value: "1", Why: "a"},
		{Name: "net.ipv4.vs.conntrack", Value: "1", Why: "b"},
		{Name: "net.ipv4.missing/dir.x", Value: "1", Why: "needed for c"},
	})
	if len(changed) != 1 || changed[0].Name != "net.ipv4.vs.conntrack" {
		t.Errorf("changed %v, want only vs.conntrack", changed)
	}
	if err == nil || !strings.Contains(err.Error(), "net.ipv4.missing/dir.x=1 (needed for c)") {
		t.Errorf("error %v must name the failed sysctl and why", err)
	}
	if v, _ := Get("net.ipv4.vs.conntrack"); v != "1" {
		t.Errorf("vs.conntrack = %q", v)
	}
}

// --ipvs-rate-estimation: kernel (the default, and "") leaves run_estimation alone; on and
// off set it; anything else is refused.
func TestRateEstimationSetsRunEstimationOnlyWhenAsked(t *testing.T) {
	value := func(o Options) (string, bool) {
		for _, s := range ForProxy("6.1.0-57-amd64", o) {
			if s.Name == RunEstimation {
				return s.Value, true
			}
		}
		return "", false
	}
	for _, in := range []string{"", "kernel"} {
		r, err := ParseRateEstimation(in)
		if err != nil || r != RateEstimationKernel {
			t.Fatalf("ParseRateEstimation(%q) = %q, %v", in, r, err)
		}
		if v, set := value(Options{RateEstimation: r}); set {
			t.Errorf("%q: run_estimation set to %s", in, v)
		}
	}
	for in, want := range map[string]string{"off": "0", "on": "1"} {
		r, err := ParseRateEstimation(in)
		if err != nil {
			t.Fatal(err)
		}
		if v, set := value(Options{RateEstimation: r}); !set || v != want {
			t.Errorf("%s: run_estimation = %q (set %v), want %s", in, v, set, want)
		}
	}
	if _, err := ParseRateEstimation("false"); err == nil {
		t.Error(`"false" accepted`)
	}
}

// The table size is kube-proxy's: maxPerCore x CPUs, capped at 1Mi, never below min; 0
// leaves it alone.
func TestConntrackMax(t *testing.T) {
	cases := []struct {
		c    Conntrack
		cpus int
		want int
	}{
		{Conntrack{MaxPerCore: 32768, Min: 131072}, 2, 131072},     // min wins
		{Conntrack{MaxPerCore: 32768, Min: 131072}, 8, 262144},     // scaled wins
		{Conntrack{MaxPerCore: 32768, Min: 131072}, 512, 1 << 20},  // capped
		{Conntrack{MaxPerCore: 32768, Min: 2 << 20}, 512, 2 << 20}, // min above the cap (D11)
		{Conntrack{MaxPerCore: 0, Min: 131072}, 8, 0},              // leave alone
		{Conntrack{MaxPerCore: 1000}, 3, 3000},
	}
	for _, c := range cases {
		if got := ConntrackMax(c.c, c.cpus); got != c.want {
			t.Errorf("ConntrackMax(%+v, %d) = %d, want %d", c.c, c.cpus, got, c.want)
		}
	}
}

// nf_conntrack_max and the hash size are only raised; the timeouts are set exactly, in
// seconds, and only when non-zero; tcpBeLiberal only when true. A read-only file is an
// unwritable *Error naming the setting.
func TestConntrackSettingsRaiseTheTableAndSetTimeouts(t *testing.T) {
	Root, SysRoot = t.TempDir(), t.TempDir()
	defer func() { Root, SysRoot = "/proc/sys", "/sys" }()
	mk := func(p, v string) {
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, []byte(v+"\n"), 0o644)
	}
	mk(path(ConntrackMaxName), "262144") // raised by the operator: stays
	mk(filepath.Join(SysRoot, ConntrackHashsizeFile), "16384")
	for _, n := range []string{"tcp_timeout_established", "tcp_timeout_close_wait", "tcp_be_liberal", "udp_timeout", "udp_timeout_stream"} {
		mk(path("net.netfilter.nf_conntrack_"+n), "7")
	}
	c := Conntrack{MaxPerCore: 32768, Min: 131072, TCPEstablishedTimeout: 24 * time.Hour, TCPCloseWaitTimeout: time.Hour, UDPStreamTimeout: 90 * time.Second}
	if _, err := Apply(ForConntrack(c, 2)); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{
		ConntrackMaxName: "262144",
		"net.netfilter.nf_conntrack_tcp_timeout_established": "86400",
		"net.netfilter.nf_conntrack_tcp_timeout_close_wait":  "3600",
		"net.netfilter.nf_conntrack_udp_timeout_stream":      "90",
		"net.netfilter.nf_conntrack_udp_timeout":             "7", // 0: left alone
		"net.netfilter.nf_conntrack_tcp_be_liberal":          "7", // false: left alone
	} {
		if got, _ := Get(name); got != want {
			t.Errorf("%s = %s, want %s", name, got, want)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(SysRoot, ConntrackHashsizeFile)); string(b) != "32768" {
		t.Errorf("hashsize = %q, want 32768 (131072/4)", b)
	}

	// Lower the table: it is raised back. Make be_liberal read-only and ask for it.
	mk(path(ConntrackMaxName), "1000")
	os.Chmod(path("net.netfilter.nf_conntrack_tcp_be_liberal"), 0o444)
	c.TCPBeLiberal = true
	_, err := Apply(ForConntrack(c, 2))
	if got, _ := Get(ConntrackMaxName); got != "131072" {
		t.Errorf("nf_conntrack_max = %s, want raised to 131072", got)
	}
	if os.Geteuid() == 0 {
		return // root writes a 0444 file anyway
	}
	errs := Errors(err)
	if len(errs) != 1 || !errs[0].Unwritable() || errs[0].Setting.Name != "net.netfilter.nf_conntrack_tcp_be_liberal" || errs[0].Current != "7" {
		t.Fatalf("errors %v, want one unwritable tcp_be_liberal, now 7", err)
	}
	if !strings.Contains(err.Error(), "sysctl net.netfilter.nf_conntrack_tcp_be_liberal=1") {
		t.Errorf("error %q does not name the sysctl and value", err)
	}
}

func TestCountCPUList(t *testing.T) {
	for in, want := range map[string]int{"0": 1, "0-3": 4, "0-3,8,10-11": 7, "": 0, "x": 0, "3-1": 0} {
		if got := countCPUList(in); got != want {
			t.Errorf("countCPUList(%q) = %d, want %d", in, got, want)
		}
	}
}

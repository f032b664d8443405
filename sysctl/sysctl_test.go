package sysctl

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
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
		{"net.ipv4.ip_forward", "1", "a"},
		{"net.ipv4.vs.conntrack", "1", "b"},
		{"net.ipv4.missing/dir.x", "1", "needed for c"},
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

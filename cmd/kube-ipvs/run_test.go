package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kube-ipvs/kube-ipvs/config"
)

func TestRunHelpStatesEveryDefault(t *testing.T) {
	var out, errb bytes.Buffer
	if code := runRun([]string{"--help"}, &out, &errb); code != 0 {
		t.Fatalf("--help exited %d: %s", code, errb.String())
	}
	var o runOptions
	fs := runFlags(&o)
	lines := strings.Split(out.String(), "\n")
	for _, name := range []string{"kubeconfig", "manifests", "hostname-override", "scheduler", "sync-period",
		"min-sync-period", "nodeport-addresses", "service-node-port-range", "dummy-interface", "once", "log-level",
		"graceful-termination-timeout", "ipvs-tcp-timeout", "ipvs-tcpfin-timeout", "ipvs-udp-timeout", "strict-arp", "healthz-bind-address", "metrics-bind-address", "cluster-cidr", "masquerade-all", "iptables-backend", "config", "exclude-cidrs", "mode"} {
		if fs.Lookup(name) == nil {
			t.Errorf("flag --%s is not defined", name)
			continue
		}
		found := false
		for _, l := range lines {
			if (strings.Contains(l, "--"+name+" ") || strings.Contains(l, "--"+name+"[")) && strings.Contains(l, "default") {
				found = true
			}
		}
		if !found {
			t.Errorf("--help has no line for --%s stating its default:\n%s", name, out.String())
		}
	}
}

func TestRunFlagValidation(t *testing.T) {
	cases := []struct {
		args    []string
		wantErr string
	}{
		{[]string{"--scheduler", "fastest"}, `--scheduler="fastest": not an IPVS scheduler`},
		{[]string{"--sync-period", "0s"}, "--sync-period=0s: must be positive"},
		{[]string{"--min-sync-period", "1m", "--sync-period", "30s"}, "--min-sync-period=1m0s"},
		{[]string{"--nodeport-addresses", "10.0.0.0/8,bogus"}, `--nodeport-addresses: "bogus" is not a CIDR`},
		{[]string{"--service-node-port-range", "32767-30000"}, "--service-node-port-range"},
		{[]string{"--log-level", "loud"}, "--log-level"},
		{[]string{"--cluster-cidr", "10.244.0.0/16,nope"}, `--cluster-cidr: "nope" is not a CIDR`},
		{[]string{"--iptables-backend", "ebpf"}, `--iptables-backend="ebpf"`},
		{[]string{"--mode", "ebpf"}, `--mode="ebpf"`},
	}
	for _, tc := range cases {
		var out, errb bytes.Buffer
		code := runRun(append(tc.args, "--hostname-override", "n"), &out, &errb)
		if code != 2 || !strings.Contains(errb.String(), tc.wantErr) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and %q", tc.args, code, errb.String(), tc.wantErr)
		}
	}
}

func TestRunConfigDefaults(t *testing.T) {
	var o runOptions
	fs := runFlags(&o)
	if err := fs.Parse([]string{"--hostname-override", "n1", "--nodeport-addresses", "10.0.0.0/8"}); err != nil {
		t.Fatal(err)
	}
	cfg, err := o.controllerConfig()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.DefaultScheduler != "rr" || cfg.SyncPeriod != 30*time.Second || cfg.MinSyncPeriod != time.Second ||
		o.ipvsMode.NodePortMin != 30000 || o.ipvsMode.NodePortMax != 32767 || len(cfg.NodePortAddresses) != 1 || cfg.NodeName != "n1" {
		t.Fatalf("defaults: %+v", cfg)
	}
}

// Every setting a config file can carry has a flag, so ApplyToFlags never drops one.
func TestEveryConfigSettingHasAFlag(t *testing.T) {
	var o runOptions
	fs := runFlags(&o)
	for _, name := range config.FlagNames() {
		if fs.Lookup(name) == nil {
			t.Errorf("config files can set %q but run has no such flag", name)
		}
	}
}

func TestConfigFileWithFlagsOverriding(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "kp.yaml")
	os.WriteFile(file, []byte("apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: ipvs\nipvs:\n  scheduler: lc\n  syncPeriod: 45s\n  strictARP: true\nclusterCIDR: 10.244.0.0/16\n"), 0o644)
	var o runOptions
	fs := runFlags(&o)
	if err := fs.Parse([]string{"--config", file, "--sync-period", "10s"}); err != nil {
		t.Fatal(err)
	}
	s, _, err := config.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := config.ApplyToFlags(s, fs); err != nil {
		t.Fatal(err)
	}
	if o.Scheduler != "lc" || o.SyncPeriod != 10*time.Second || !o.StrictARP || len(o.ClusterCIDRs) != 1 {
		t.Errorf("after the file and flags: scheduler %s sync %s strictARP %v cluster %v", o.Scheduler, o.SyncPeriod, o.StrictARP, o.ClusterCIDRs)
	}
	var out, errb bytes.Buffer
	os.WriteFile(file, []byte("apiVersion: kube-ipvs.io/v1alpha1\nkind: KubeIPVSConfiguration\nsyncPeriod: 3x\n"), 0o644)
	if code := runRun([]string{"--config", file}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "syncPeriod") {
		t.Errorf("a bad value in the file: exit %d, %q", code, errb.String())
	}
}

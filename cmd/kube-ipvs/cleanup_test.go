package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kube-ipvs/kube-ipvs/cleanup"
)

func TestCleanupHelpAndUsageErrors(t *testing.T) {
	var out, errb bytes.Buffer
	if code := dispatch([]string{"cleanup", "--help"}, &out, &errb); code != 0 {
		t.Fatalf("--help: exit %d", code)
	}
	for _, f := range []string{"--dry-run", "--kube-proxy", "--force", "--output", "--lock-file", "/run/kube-ipvs.lock", "--exclude-cidrs", "--service-node-port-range"} {
		if !strings.Contains(out.String(), f) {
			t.Errorf("--help does not mention %s", f)
		}
	}
	file := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(file, []byte("apiVersion: kube-ipvs.io/v1alpha1\nkind: KubeIPVSConfiguration\nserviceNodePortRange: nope\n"), 0o644)
	for _, args := range [][]string{
		{"--bogus"},
		{"-o", "yaml"},
		{"extra"},
		{"--service-node-port-range", "3-2"},
		{"--exclude-cidrs", "10.0.0.0"},
		{"--nodeport-addresses", "primary,localhost"},
		{"--dummy-interface", ""},
		{"--config", file},
	} {
		out.Reset()
		errb.Reset()
		if code := runCleanup(args, &out, &errb); code != 2 {
			t.Errorf("%q: exit %d, want 2 (stderr %q)", args, code, errb.String())
		}
	}
}

// The configuration file gives cleanup the settings it shares with run and nothing else;
// the command line wins.
func TestCleanupTakesItsSettingsFromTheConfigFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(file, []byte("apiVersion: kube-ipvs.io/v1alpha1\nkind: KubeIPVSConfiguration\nscheduler: lc\nserviceNodePortRange: 20000-20100\nexcludeCIDRs: [10.96.9.0/24]\ndummyInterface: kipvs9\n"), 0o644)
	var o cleanupOptions
	fs := cleanupFlags(&o)
	if err := fs.Parse([]string{"--config", file, "--dummy-interface", "kipvs1"}); err != nil {
		t.Fatal(err)
	}
	cfg, err := o.config(fs)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Dummy != "kipvs1" || cfg.Ownership.NodePortMin != 20000 || cfg.Ownership.NodePortMax != 20100 ||
		len(cfg.Ownership.ExcludeCIDRs) != 1 || cfg.Ownership.ExcludeCIDRs[0].String() != "10.96.9.0/24" {
		t.Errorf("config: %+v", cfg)
	}
}

func TestCleanupReport(t *testing.T) {
	objs := []cleanup.Object{
		{Kind: cleanup.KindVirtualServer, Name: "TCP 10.96.0.1:443", Family: "ipv4", Owner: cleanup.OwnerKubeIPVS},
		{Kind: cleanup.KindSet, Name: "KIPVS-VIPS", Family: "ipv4", Owner: cleanup.OwnerKubeIPVS, Error: "set is referenced by iptables rules"},
	}
	var out, errb bytes.Buffer
	report{DryRun: true, Objects: objs[:1], Notes: []string{"n"}}.write(&out, &errb, "text")
	if out.String() != "would remove virtual-server TCP 10.96.0.1:443 (kube-ipvs)\n" || errb.String() != "kube-ipvs cleanup: note: n\n" {
		t.Errorf("dry run: %q %q", out.String(), errb.String())
	}
	out.Reset()
	errb.Reset()
	report{Objects: objs}.write(&out, &errb, "text")
	if out.String() != "removed virtual-server TCP 10.96.0.1:443 (kube-ipvs)\n" ||
		errb.String() != "kube-ipvs cleanup: could not remove ipset KIPVS-VIPS (kube-ipvs): set is referenced by iptables rules\n" {
		t.Errorf("run: %q %q", out.String(), errb.String())
	}
	out.Reset()
	report{}.write(&out, &errb, "text")
	if out.String() != "nothing to remove\n" {
		t.Errorf("empty: %q", out.String())
	}
	out.Reset()
	report{Objects: objs}.write(&out, &errb, "json")
	var got struct {
		DryRun  bool             `json:"dryRun"`
		Failed  int              `json:"failed"`
		Objects []cleanup.Object `json:"objects"`
	}
	if err := json.Unmarshal(out.Bytes(), &got); err != nil || got.Failed != 1 || len(got.Objects) != 2 || got.Objects[1].Error == "" || got.Objects[0].Kind != "virtual-server" {
		t.Errorf("json: %v %s", err, out.String())
	}
}

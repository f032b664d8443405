package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kube-ipvs/kube-ipvs/preflight"
)

func runPreflightFake(t *testing.T, f *preflight.Fake, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := preflightMain(args, &out, &errb, f.Deps())
	return code, out.String(), errb.String()
}

func TestPreflightExitCodes(t *testing.T) {
	f := preflight.NewFake()
	code, out, _ := runPreflightFake(t, f)
	if code != 0 {
		t.Fatalf("exit %d on a node that can load everything:\n%s", code, out)
	}
	if !strings.HasPrefix(out, "CHECK ") || !strings.HasSuffix(out, "IPVS mode: usable\n") {
		t.Errorf("table output:\n%s", out)
	}
	t.Logf("table:\n%s", out)

	f = preflight.NewFake()
	f.ModprobeErr["ip_vs"] = errors.New("modprobe ip_vs: exit status 1")
	code, out, _ = runPreflightFake(t, f)
	if code != 1 || !strings.Contains(out, "NOT usable") {
		t.Errorf("exit %d with ip_vs unloadable, want 1:\n%s", code, out)
	}
	t.Logf("table:\n%s", out)
}

func TestPreflightJSON(t *testing.T) {
	f := preflight.NewFake()
	code, out, _ := runPreflightFake(t, f, "--no-modprobe", "-o", "json")
	if code != 1 {
		t.Errorf("exit %d with --no-modprobe on a bare node, want 1", code)
	}
	var rep struct {
		IPVSUsable *bool `json:"ipvsUsable"`
		Checks     []struct{ Name, Status, Detail, Fix string }
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("-o json is not JSON: %v\n%s", err, out)
	}
	if rep.IPVSUsable == nil || *rep.IPVSUsable || len(rep.Checks) == 0 {
		t.Errorf("report %+v", rep)
	}
	if ops := f.TakeOps(); strings.Contains(strings.Join(ops, ","), "modprobe") {
		t.Errorf("--no-modprobe ran %v", ops)
	}
}

func TestPreflightUsageErrors(t *testing.T) {
	cases := map[string][]string{
		"bad output":       {"-o", "yaml"},
		"bad scheduler":    {"--scheduler", "fastest"},
		"extra argument":   {"now"},
		"unknown flag":     {"--frobnicate"},
		"missing manifest": {"--manifests", filepath.Join(t.TempDir(), "nope")},
		"bad timeout":      {"--timeout", "0s"},
	}
	for name, args := range cases {
		t.Run(name, func(t *testing.T) {
			f := preflight.NewFake()
			code, out, errs := runPreflightFake(t, f, args...)
			if code != 2 {
				t.Errorf("exit %d, want 2; stdout %q stderr %q", code, out, errs)
			}
			if len(f.TakeOps()) != 0 {
				t.Error("a usage error still touched the (fake) kernel")
			}
		})
	}
	var out, errb bytes.Buffer
	if code := dispatch([]string{"preflight", "--help"}, &out, &errb); code != 0 || !strings.Contains(out.String(), "--no-modprobe") {
		t.Errorf("preflight --help: exit %d, %q", code, out.String())
	}
}

func TestPreflightManifests(t *testing.T) {
	dir := t.TempDir()
	yaml := `apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: default
  annotations:
    kube-ipvs.io/scheduler: sh
spec:
  clusterIP: 10.96.0.10
  ports:
  - port: 80
`
	if err := os.WriteFile(filepath.Join(dir, "svc.yaml"), []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	f := preflight.NewFake()
	f.ModprobeErr["ip_vs_sh"] = errors.New("modprobe ip_vs_sh: not found")
	code, out, errs := runPreflightFake(t, f, "--manifests", dir, "-o", "json")
	if code != 0 {
		t.Errorf("exit %d: an annotation-only scheduler must not block IPVS; stderr %s", code, errs)
	}
	for _, want := range []string{`"name": "services"`, "1 Services from --manifests", `"name": "module ip_vs_sh"`, "default/web"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

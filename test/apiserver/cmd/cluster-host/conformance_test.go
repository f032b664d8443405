package main

import (
	"os"
	"path/filepath"
	"testing"
)

// A report as the e2e framework writes it (junit_01.xml: ginkgo's JUnit with the failure
// message attribute left out and the specs sorted by name).
const junitSample = `<?xml version="1.0" encoding="UTF-8"?>
<testsuites tests="5" disabled="2" errors="0" failures="1" time="100.5">
  <testsuite name="Kubernetes e2e suite" package="/e2e" tests="5" disabled="2" skipped="0" errors="0" failures="1" time="100.5">
    <testcase name="[SynchronizedBeforeSuite]" classname="Kubernetes e2e suite" status="passed" time="1.2"></testcase>
    <testcase name="[It] [sig-network] Services should serve a basic endpoint from pods  [Conformance]" classname="Kubernetes e2e suite" status="passed" time="30.04"></testcase>
    <testcase name="[It] [sig-network] Services should have session affinity work for NodePort service [LinuxOnly] [Conformance]" classname="Kubernetes e2e suite" status="failed" time="65.3">
      <failure message="" type="failed">[FAILED] Affinity should hold but didn&#39;t.
In [It] at: k8s.io/kubernetes/test/e2e/network/service.go:4123 @ 12/05/26 17:30:00.000
</failure>
      <system-err>the timeline</system-err>
    </testcase>
    <testcase name="[It] [sig-network] Services should be rejected for evicted pods" classname="Kubernetes e2e suite" status="skipped" time="0">
      <skipped message="skipped"></skipped>
    </testcase>
    <testcase name="[It] [sig-network] Services should work with the node's IPv6 address [Feature:IPv6DualStack]" classname="Kubernetes e2e suite" status="skipped" time="2.1">
      <skipped message="skipped - Only supported for IPv6 clusters"></skipped>
    </testcase>
    <testcase name="[ReportAfterSuite] Kubernetes e2e suite report" classname="Kubernetes e2e suite" status="passed" time="0"></testcase>
  </testsuite>
</testsuites>`

func TestReadJUnit(t *testing.T) {
	p := filepath.Join(t.TempDir(), "junit_01.xml")
	if err := os.WriteFile(p, []byte(junitSample), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := readJUnit(p)
	if err != nil {
		t.Fatal(err)
	}
	if r.Passed != 1 || r.Failed != 1 || r.Skipped != 1 || r.NotRun != 1 || len(r.Specs) != 3 {
		t.Fatalf("got %d passed, %d failed, %d skipped, %d not selected, %d specs: %+v",
			r.Passed, r.Failed, r.Skipped, r.NotRun, len(r.Specs), r.Specs)
	}
	want := []specResult{
		{"[sig-network] Services should have session affinity work for NodePort service [LinuxOnly] [Conformance]", "failed", 65.3, "[FAILED] Affinity should hold but didn't."},
		{"[sig-network] Services should serve a basic endpoint from pods [Conformance]", "passed", 30, ""},
		{"[sig-network] Services should work with the node's IPv6 address [Feature:IPv6DualStack]", "skipped", 2.1, "Only supported for IPv6 clusters"},
	}
	for i, w := range want {
		if r.Specs[i] != w {
			t.Errorf("spec %d: got %+v, want %+v", i, r.Specs[i], w)
		}
	}
}

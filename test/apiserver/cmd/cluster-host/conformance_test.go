package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A report as the e2e framework writes it (junit_01.xml: ginkgo's JUnit with the failure
// message attribute left out and the specs sorted by name).
const junitSample = `<?xml version="1.0" encoding="UTF-8"?>
<testsuites tests="7" disabled="4" errors="0" failures="1" time="100.5">
  <testsuite name="Kubernetes e2e suite" package="/e2e" tests="7" disabled="4" skipped="0" errors="0" failures="1" time="100.5">
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
    <testcase name="[It] [sig-network] Services should be able to switch session affinity for NodePort service [Serial]" classname="Kubernetes e2e suite" status="skipped" time="0">
      <skipped message="skipped"></skipped>
    </testcase>
    <testcase name="[It] [sig-apps] Deployment should run [Serial]" classname="Kubernetes e2e suite" status="skipped" time="0">
      <skipped message="skipped"></skipped>
    </testcase>
    <testcase name="[ReportAfterSuite] Kubernetes e2e suite report" classname="Kubernetes e2e suite" status="passed" time="0"></testcase>
  </testsuite>
</testsuites>`

// readSample reads junitSample with focus [sig-network] and a three-term skip.
func readSample(t *testing.T) *results {
	t.Helper()
	p := filepath.Join(t.TempDir(), "junit_01.xml")
	if err := os.WriteFile(p, []byte(junitSample), 0o644); err != nil {
		t.Fatal(err)
	}
	sel, err := newSelection(`\[sig-network\]`, `\[Serial\]|Alpha|(evicted|foo)`)
	if err != nil {
		t.Fatal(err)
	}
	r, err := readJUnit(p, sel)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestReadJUnit(t *testing.T) {
	r := readSample(t)
	if r.Passed != 1 || r.Failed != 1 || r.Skipped != 1 || r.NotRun != 3 || len(r.Specs) != 3 {
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

// The specs of the focus that the skip left out are listed with the alternative that matched;
// those outside the focus are only counted.
func TestReadJUnitListsExcludedSpecs(t *testing.T) {
	r := readSample(t)
	want := []excludedSpec{
		{"[sig-network] Services should be able to switch session affinity for NodePort service [Serial]", `\[Serial\]`},
		{"[sig-network] Services should be rejected for evicted pods", "(evicted|foo)"},
	}
	if len(r.Excluded) != len(want) {
		t.Fatalf("excluded: got %+v, want %+v", r.Excluded, want)
	}
	for i, w := range want {
		if r.Excluded[i] != w {
			t.Errorf("excluded %d: got %+v, want %+v", i, r.Excluded[i], w)
		}
	}
}

func TestSkipTermsSplitsTopLevelAlternatives(t *testing.T) {
	for re, want := range map[string][]string{
		"":                         nil,
		`\[Serial\]|Alpha`:         {`\[Serial\]`, "Alpha"},
		`a(b|c)|[|x]|d\|e|f`:       {"a(b|c)", "[|x]", `d\|e`, "f"},
		`session.affinity.timeout`: {"session.affinity.timeout"},
	} {
		got := skipTerms(re)
		if strings.Join(got, "\n") != strings.Join(want, "\n") || len(got) != len(want) {
			t.Errorf("skipTerms(%q) = %q, want %q", re, got, want)
		}
	}
}

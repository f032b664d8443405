package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func sampleRuns() selectionRuns {
	kp := &results{Proxy: kubeProxy, Command: "make conformance PROXY=kube-proxy SELECTION=sig-network", Focus: `\[sig-network\]`,
		Skip: `\[Serial\]|Alpha`, Procs: 3, Seconds: 3723, Passed: 1, Failed: 1, Skipped: 1,
		Specs: []spec{
			{Name: "[sig-network] A passes", State: "passed", Seconds: 12},
			{Name: "[sig-network] B fails for both", State: "failed", Seconds: 130, Message: "[FAILED] timed out"},
			{Name: "[sig-network] C needs nodes", State: "skipped", Message: "Requires at least 2 nodes (not 1)"},
		},
		Excluded: []excluded{{Name: "[sig-network] D [Serial]", Term: `\[Serial\]`}},
	}
	ki := &results{Proxy: kubeIPVS, Command: "make conformance SELECTION=sig-network", Focus: kp.Focus, Skip: kp.Skip, Procs: 3,
		Seconds: 3000, Passed: 0, Failed: 2, Skipped: 1,
		Specs: []spec{
			{Name: "[sig-network] A passes", State: "failed", Seconds: 120, Message: "[FAILED] `x` not reachable"},
			{Name: "[sig-network] B fails for both", State: "failed", Seconds: 131, Message: "[FAILED] timed out"},
			{Name: "[sig-network] C needs nodes", State: "skipped", Message: "Requires at least 2 nodes (not 1)"},
		},
		Excluded: []excluded{{Name: "[sig-network] D [Serial]", Term: `\[Serial\]`}},
	}
	return selectionRuns{Key: "sig-network", Title: "wide", Intro: "intro", KubeProxy: kp, KubeIPVS: ki,
		Skip: []skipReason{{Term: `\[Serial\]`, Why: "must run alone"}, {Term: "Alpha", Why: "feature gates"}}}
}

func TestRenderSideBySide(t *testing.T) {
	text, unexplained := render(page{
		Selections: []selectionRuns{sampleRuns(), {Key: "services", Title: "conformance", Intro: "fifteen"}},
		Explained:  []explanation{{Proxy: "both", Spec: "[sig-network] B fails for both", Why: "the node is emulated: 130 s"}},
	})
	for _, want := range []string{
		"| sig-network | kube-proxy (IPVS) | **1** | **1** | 1 | 1 | 1h2m3s |",
		"| sig-network | kube-ipvs | **0** | **2** | 1 | 1 | 50m0s |",
		"| services | kube-ipvs | not run | | | | |",
		"| [sig-network] A passes | passed (12 s) | **failed** (120 s) |",
		"| [sig-network] C needs nodes | skipped | skipped |",
		"  - kube-ipvs: `[FAILED] 'x' not reachable`\n    **not explained yet**",
		"  - kube-proxy: `[FAILED] timed out`\n    the node is emulated: 130 s",
		"- Requires at least 2 nodes (not 1) (both)\n  - [sig-network] C needs nodes",
		"| `\\[Serial\\]` | must run alone | 1 |",
		"| `Alpha` | feature gates | 0 |",
		"<details><summary>\\[Serial\\]: 1 specs</summary>\n\n- [sig-network] D [Serial]",
		"## conformance\n\nfifteen\n\nNot run yet.",
		"| command | `make conformance PROXY=kube-proxy SELECTION=sig-network` | `make conformance SELECTION=sig-network` |",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("page lacks %q:\n%s", want, text)
		}
	}
	if len(unexplained) != 1 || unexplained[0] != "kube-ipvs: [sig-network] A passes" {
		t.Errorf("unexplained = %q, want only kube-ipvs' failure of A", unexplained)
	}
}

func TestRenderSaysWhenBuildsDiffer(t *testing.T) {
	s := sampleRuns()
	s.KubeProxy.Build, s.KubeIPVS.Build = "kube-ipvs abc, e2e.test and images k1", "kube-ipvs abc, e2e.test and images k1"
	text, _ := render(page{Selections: []selectionRuns{s}})
	if strings.Contains(text, "different builds") || !strings.Contains(text, "| build | kube-ipvs abc, e2e.test and images k1 |") {
		t.Errorf("same builds:\n%s", text)
	}
	s.KubeIPVS.Build = "kube-ipvs def, e2e.test and images k1"
	if text, _ = render(page{Selections: []selectionRuns{s}}); strings.Contains(text, "different builds") ||
		!strings.Contains(text, "Both runs used the same e2e.test and images (k1)") {
		t.Errorf("same suite, other checkout:\n%s", text)
	}
	s.KubeIPVS.Build = "kube-ipvs def, e2e.test and images k2"
	if text, _ = render(page{Selections: []selectionRuns{s}}); !strings.Contains(text, "different builds") {
		t.Errorf("different builds not said:\n%s", text)
	}
	s.KubeIPVS.Build, s.KubeIPVS.SuiteKey = "kube-ipvs def", "k1"
	if text, _ = render(page{Selections: []selectionRuns{s}}); strings.Contains(text, "different builds") {
		t.Errorf("suiteKey k1 on both sides, yet different builds said:\n%s", text)
	}
}

func TestSuiteKey(t *testing.T) {
	for _, c := range []struct {
		r    results
		want string
	}{
		{results{SuiteKey: "k9", Build: "kube-ipvs a, e2e.test and images k1"}, "k9"},
		{results{Build: "kube-ipvs a, e2e.test and images k1"}, "k1"},
		{results{Build: "kube-ipvs 24ba673 (by hand), e2e.test and images 6cc7d604 (agnhost without iperf)"}, "6cc7d604"},
		{results{Build: "kube-ipvs a"}, ""},
	} {
		if got := c.r.suiteKey(); got != c.want {
			t.Errorf("suiteKey of %+v = %q, want %q", c.r, got, c.want)
		}
	}
}

// writeFiles writes each path's text, making its folder.
func writeFiles(t *testing.T, files map[string]string) {
	t.Helper()
	for path, text := range files {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// notesFiles are the hack/conformance files run reads, under hack.
func notesFiles(hack string) map[string]string {
	return map[string]string{
		filepath.Join(hack, "sig-network-skip.txt"):        "Alpha\tgates\n",
		filepath.Join(hack, "sig-network-others-skip.txt"): "Services\tthe other half\n",
		filepath.Join(hack, "nodes-skip.txt"):              "# MIN, term, why\n2\ttwo nodes\tone node\n6\tzoned (a|b)\tthree zones of two\n",
		filepath.Join(hack, "serial-skip.txt"):             "# none yet\n",
		filepath.Join(hack, "explained.txt"):               "# none\n",
	}
}

// runPage runs the command on dir and hack and returns the page.
func runPage(t *testing.T, dir, hack string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "conformance.md")
	if err := run(dir, hack, out); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// section returns the page's text from the heading that starts with heading to the next
// heading of its level, or "".
func section(page, heading string) string {
	i := strings.Index(page, "\n"+heading)
	if i < 0 {
		return ""
	}
	rest := page[i+1:]
	if j := strings.Index(rest[len(heading):], "\n## "); j >= 0 {
		return rest[:len(heading)+j]
	}
	return rest
}

// run reads SELECTION/PROXY.json under --results and the notes under --hack.
func TestRunReadsPublishedResults(t *testing.T) {
	dir, hack := t.TempDir(), t.TempDir()
	files := notesFiles(hack)
	files[filepath.Join(dir, "sig-network-others", "kube-proxy.json")] = `{"proxy":"kube-proxy","passed":1,"skip":"Alpha|Services|two nodes|zoned (a|b)",` +
		`"specs":[{"name":"[sig-network] D","state":"passed"}],"excluded":[{"name":"[sig-network] Services x","term":"Services"},` +
		`{"name":"[sig-network] zoned a","term":"zoned (a|b)"},{"name":"[sig-network] zoned b","term":"zoned (a|b)"}]}`
	files[filepath.Join(dir, "services", "kube-ipvs.json")] = `{"proxy":"kube-ipvs","passed":15,"specs":[{"name":"[sig-network] S","state":"passed"}]}`
	writeFiles(t, files)
	page := runPage(t, dir, hack)
	for _, want := range []string{"| services | kube-ipvs | **15** |", "| services | kube-proxy (IPVS) | not run |", "| [sig-network] S | not run | passed (0 s) |",
		"| sig-network-services | kube-ipvs | not run |", "| sig-network-others | kube-proxy (IPVS) | **1** |",
		"(hack/conformance/sig-network-skip.txt, sig-network-others-skip.txt and nodes-skip.txt: each term",
		"| `Alpha` | gates | 0 |", "| `Services` | the other half | 1 |",
		// nodes-skip.txt's terms: the reason and the nodes their specs need.
		"| `two nodes` | on fewer than 2 nodes: one node | 0 |",
		"| `zoned (a\\|b)` | on fewer than 6 nodes: three zones of two | 2 |",
		"<details><summary>zoned (a\\|b): 2 specs</summary>\n\n- [sig-network] zoned a\n- [sig-network] zoned b",
		// The three-zone selection, not run yet: both proxies' rows and its section.
		"| sig-network-zones | kube-proxy (IPVS) | not run |", "| sig-network-zones | kube-ipvs | not run |",
		"## [sig-network], three zones: `make conformance SELECTION=sig-network-zones NODES=6`\n\nThe specs",
		"two each, with the wide selection's skip.\n\nNot run yet.\n"} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q:\n%s", want, page)
		}
	}
}

// The three-zone selection's section shows both proxies' runs side by side once they exist,
// with the wide selection's skip and not nodes-skip.txt's terms (its runs have six nodes).
func TestRunRendersZonesSelection(t *testing.T) {
	dir, hack := t.TempDir(), t.TempDir()
	files := notesFiles(hack)
	const runJSON = `{"proxy":"%s","command":"make conformance PROXY=%s SELECTION=sig-network-zones NODES=6","focus":"\\[sig-network\\] (zoned (a|b))",` +
		`"skip":"Alpha","procs":1,"seconds":600,"passed":%d,"failed":%d,"specs":[{"name":"[sig-network] zoned a","state":"passed","seconds":5},` +
		`{"name":"[sig-network] zoned b","state":"%s","seconds":9,"message":"[FAILED] wrong zone"}]}`
	files[filepath.Join(dir, "sig-network-zones", "kube-proxy.json")] = fmt.Sprintf(runJSON, kubeProxy, kubeProxy, 2, 0, "passed")
	files[filepath.Join(dir, "sig-network-zones", "kube-ipvs.json")] = fmt.Sprintf(runJSON, kubeIPVS, kubeIPVS, 1, 1, "failed")
	writeFiles(t, files)
	page := runPage(t, dir, hack)
	for _, want := range []string{
		"| sig-network-zones | kube-proxy (IPVS) | **2** | **0** | 0 | 0 | 10m0s |",
		"| sig-network-zones | kube-ipvs | **1** | **1** | 0 | 0 | 10m0s |",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q:\n%s", want, page)
		}
	}
	zones := section(page, "## [sig-network], three zones")
	for _, want := range []string{
		"| command | `make conformance PROXY=kube-proxy SELECTION=sig-network-zones NODES=6` | `make conformance PROXY=kube-ipvs SELECTION=sig-network-zones NODES=6` |",
		"| focus | `\\[sig-network\\] (zoned (a\\|b))` | `\\[sig-network\\] (zoned (a\\|b))` |",
		"| [sig-network] zoned a | passed (5 s) | passed (5 s) |",
		"| [sig-network] zoned b | passed (9 s) | **failed** (9 s) |",
		"  - kube-ipvs: `[FAILED] wrong zone`\n    **not explained yet**",
		"(hack/conformance/sig-network-skip.txt: each term",
		"| `Alpha` | gates | 0 |",
	} {
		if !strings.Contains(zones, want) {
			t.Errorf("the three-zone section lacks %q:\n%s", want, zones)
		}
	}
	if strings.Contains(zones, "Not run yet") || strings.Contains(zones, "two nodes") || strings.Contains(zones, "on fewer than") {
		t.Errorf("the three-zone section says not run, or lists nodes-skip.txt's terms:\n%s", zones)
	}
}

func TestUnusedExplanations(t *testing.T) {
	pg := page{Selections: []selectionRuns{sampleRuns()}, Explained: []explanation{
		{Proxy: "both", Spec: "[sig-network] B fails for both", Why: "used"},
		{Proxy: "kube-proxy", Spec: "[sig-network] A passes", Why: "kube-proxy passes it: unused"},
		{Proxy: "kube-ipvs", Spec: "[sig-network] gone", Why: "unused"},
	}}
	u := unused(pg)
	if len(u) != 2 || u[0].Spec != "[sig-network] A passes" || u[1].Spec != "[sig-network] gone" {
		t.Errorf("unused = %+v", u)
	}
}

func TestSelfSkipsSaysWhichProxy(t *testing.T) {
	s := sampleRuns()
	s.KubeIPVS.Specs[2] = spec{Name: "[sig-network] C needs nodes", State: "passed"}
	g := selfSkips(s.KubeProxy, s.KubeIPVS)
	if len(g) != 1 || g[0].who != "kube-proxy only" || len(g[0].specs) != 1 {
		t.Fatalf("groups = %+v, want one kube-proxy-only group", g)
	}
}

func TestReadNotes(t *testing.T) {
	dir := t.TempDir()
	skip := filepath.Join(dir, "skip.txt")
	ex := filepath.Join(dir, "explained.txt")
	write := func(p, s string) {
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(skip, "# comment\n\\[Serial\\]\tmust run alone\n\nAlpha\tgates\n")
	r, err := readSkipReasons(skip)
	if err != nil || len(r) != 2 || r[0].Term != `\[Serial\]` || r[1].Why != "gates" {
		t.Fatalf("readSkipReasons = %+v, %v", r, err)
	}
	write(ex, "both\t[sig-network] B\twhy\n")
	e, err := readExplanations(ex)
	if err != nil || len(e) != 1 || why(e, kubeIPVS, "[sig-network] B") != "why" || why(e, kubeIPVS, "other") != "" {
		t.Fatalf("readExplanations = %+v, %v", e, err)
	}
	write(ex, "kube-router\t[sig-network] B\twhy\n")
	if _, err := readExplanations(ex); err == nil {
		t.Error("a proxy other than kube-proxy, kube-ipvs or both was accepted")
	}
	write(skip, "Alpha without a reason\n")
	if _, err := readSkipReasons(skip); err == nil {
		t.Error("a line without a tab was accepted")
	}
	write(skip, "# MIN, term, why\n2\ttwo nodes\tone node\n\n6\tzoned (a|b)\tthree zones of two\n")
	n, err := readNodesSkip(skip)
	if err != nil || len(n) != 2 || n[0] != (skipReason{Term: "two nodes", Why: "one node", MinNodes: 2}) ||
		n[1] != (skipReason{Term: "zoned (a|b)", Why: "three zones of two", MinNodes: 6}) {
		t.Fatalf("readNodesSkip = %+v, %v", n, err)
	}
	for _, bad := range []string{"two\ttwo nodes\tone node\n", "1\tone node\tnever skipped\n", "two nodes\tone node\n"} {
		write(skip, bad)
		if _, err := readNodesSkip(skip); err == nil {
			t.Errorf("nodes-skip line %q was accepted", bad)
		}
	}
}

// The hand-kept files of the repository parse.
func TestRepositoryNotesParse(t *testing.T) {
	hack := filepath.Join("..", "..", "..", "..", "hack", "conformance")
	for _, f := range []string{"sig-network-skip.txt", "sig-network-others-skip.txt", "serial-skip.txt"} {
		if _, err := readSkipReasons(filepath.Join(hack, f)); err != nil {
			t.Error(err)
		}
	}
	// SELECTION=sig-network-zones focuses the terms for six nodes (hack/conformance/run.sh).
	n, err := readNodesSkip(filepath.Join(hack, "nodes-skip.txt"))
	if err != nil {
		t.Error(err)
	}
	six := 0
	for _, r := range n {
		if r.MinNodes == 6 {
			six++
		}
	}
	if six == 0 {
		t.Errorf("nodes-skip.txt has no term for six nodes, which SELECTION=sig-network-zones runs: %+v", n)
	}
	if _, err := readExplanations(filepath.Join(hack, "explained.txt")); err != nil {
		t.Error(err)
	}
}

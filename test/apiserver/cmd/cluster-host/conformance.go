package main

import (
	"bufio"
	"context"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-ipvs/kube-ipvs/test/apiserver/controlplane"
)

// conformance is make conformance's run (docs/conformance.md): Kubernetes' own e2e suite,
// hack/conformance/build.sh's e2e.test, run on the host against the cluster once the Node,
// the service proxy and CoreDNS are Ready and the suite's images are on the node.
type conformance struct {
	dir          string // hack/conformance/build.sh's folder: e2e.test, ginkgo, images/
	proxy        string // kube-ipvs or kube-proxy
	focus, skip  string // ginkgo regular expressions
	report       string // where the JUnit report, the log and results.json go
	procs        int    // ginkgo's parallel processes
	timeout      string // ginkgo's suite timeout
	ran          bool   // the suite ran and its report was read
	res          *results
	passed, fail int
}

const (
	kubeProxySelector = "k8s-app=kube-proxy"
	// The suite's own default is 1h, too short for a long selection on an emulated node.
	defaultSuiteTimeout = "6h"
)

// results is what results.json holds: one run of a selection against one proxy.
type results struct {
	Proxy      string       `json:"proxy"`
	Kubernetes string       `json:"kubernetes"` // e2e.test --version
	Focus      string       `json:"focus"`
	Skip       string       `json:"skip"`
	Procs      int          `json:"procs"`
	Command    string       `json:"command"`
	Build      string       `json:"build"`    // what was run: the checkout and the suite's build (run.sh)
	SuiteKey   string       `json:"suiteKey"` // the cache key of e2e.test and its images: equal keys, same suite
	Started    time.Time    `json:"started"`
	Seconds    float64      `json:"seconds"` // the suite's run, e2e.test's start to its exit
	Passed     int          `json:"passed"`
	Failed     int          `json:"failed"`
	Skipped    int          `json:"skipped"`     // selected, then skipped by the spec itself
	NotRun     int          `json:"notSelected"` // left out by focus and skip
	Specs      []specResult `json:"specs"`
	// The specs of the focus that the skip left out, each with the skip's alternative that
	// matched it (the rest of NotRun is outside the focus).
	Excluded []excludedSpec `json:"excluded"`
}

// specResult is one spec (or a suite node that failed) of the JUnit report.
type specResult struct {
	Name    string  `json:"name"`
	State   string  `json:"state"` // passed, failed, skipped
	Seconds float64 `json:"seconds"`
	Message string  `json:"message,omitempty"` // a failure's first line, or why it was skipped
}

// deployKubeProxy applies hack/cluster/kube-proxy (kube-proxy in IPVS mode as kubeadm
// deploys it) and waits for its Pod to be Ready and for the IPVS virtual server of the
// `kubernetes` Service.
func (c *checker) deployKubeProxy(ctx context.Context) (string, error) {
	t := time.Now()
	if _, _, err := c.h.kubectl(ctx, "apply", "-k", filepath.Join(c.h.repo, "hack/cluster/kube-proxy")); err != nil {
		return "", err
	}
	n := &noter{boot: c.boot}
	var names []string
	var image string
	if err := controlplane.Poll(10*time.Minute, "a Ready kube-proxy Pod on every node", func() bool {
		pods, err := c.cs.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: kubeProxySelector})
		if err != nil {
			n.note("kube-proxy Pods: " + err.Error())
			return false
		}
		var states []string
		names = nil
		for i := range pods.Items {
			p := &pods.Items[i]
			states = append(states, p.Name+" "+podState(p))
			if podReady(p) && p.DeletionTimestamp == nil {
				names, image = append(names, p.Name+" on "+p.Spec.NodeName), p.Spec.Containers[0].Image
			}
		}
		n.note("kube-proxy Pods: " + strings.Join(states, "; "))
		return len(names) == len(c.h.nodes)
	}); err != nil {
		return "", err
	}
	kube, err := c.cs.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	vs := fmt.Sprintf("%s:%d", kube.Spec.ClusterIP, kube.Spec.Ports[0].Port)
	for _, node := range c.h.nodes {
		if err := controlplane.Poll(2*time.Minute, "kube-proxy's IPVS virtual server "+vs+" on "+node.name, func() bool {
			rep, err := c.h.onNode(ctx, node.ip, 10*time.Second, "ipvsadm", "-Ln", "-t", vs)
			return err == nil && rep.Exit == 0
		}); err != nil {
			return "", err
		}
	}
	if ds, err := c.cs.AppsV1().DaemonSets("kube-system").List(ctx, metav1.ListOptions{}); err == nil {
		for _, d := range ds.Items {
			if d.Name == "kube-ipvs" {
				return "", fmt.Errorf("a kube-ipvs DaemonSet exists")
			}
		}
	}
	return fmt.Sprintf("Pods %s Ready %s after kubectl apply -k (image %s, IPVS mode, %s programmed on every node; no kube-ipvs)",
		strings.Join(names, ", "), time.Since(t).Round(time.Second), image, vs), nil
}

// conformanceImages waits until the node has imported every image of the suite (node.sh
// imports /payload/images/conformance/ in the background) and returns how long it waited.
func (c *checker) conformanceImages(ctx context.Context) (string, error) {
	list, err := os.ReadFile(filepath.Join(c.conf.dir, "images", "images.txt"))
	if err != nil {
		return "", err
	}
	var want []string
	for _, l := range strings.Split(strings.TrimSpace(string(list)), "\n") {
		if f := strings.Fields(l); len(f) == 2 {
			want = append(want, f[1])
		}
	}
	t := time.Now()
	n := &noter{boot: c.boot}
	for _, node := range c.h.nodes {
		err = controlplane.Poll(15*time.Minute, "the conformance images on "+node.name, func() bool {
			rep, err := c.h.onNode(ctx, node.ip, 30*time.Second, "ctr", "-n", "k8s.io", "images", "ls", "-q")
			if err != nil {
				n.note(err.Error())
				return false
			}
			have := map[string]bool{}
			for _, l := range strings.Fields(rep.Output) {
				have[l] = true
			}
			var missing []string
			for _, w := range want {
				if !have[w] {
					missing = append(missing, w)
				}
			}
			n.note(fmt.Sprintf("%s: %d of %d imported; waiting for %s", node.name, len(want)-len(missing), len(want), strings.Join(missing, " ")))
			return len(missing) == 0
		})
		if err != nil {
			return "", err
		}
	}
	return fmt.Sprintf("%d images (%s) after waiting %s", len(want), strings.Join(want, " "), time.Since(t).Round(time.Second)), nil
}

// suite runs e2e.test on the host against the cluster, reads its JUnit report into
// results.json and prints each spec's result. It fails when a spec failed.
func (c *checker) suite(ctx context.Context) (string, error) {
	cf := c.conf
	if err := os.MkdirAll(cf.report, 0o755); err != nil {
		return "", err
	}
	e2e := filepath.Join(cf.dir, "e2e.test")
	version, _ := exec.CommandContext(ctx, e2e, "--version").Output()
	// The framework's flags (test/e2e/framework/test_context.go). skeleton, as kind's jobs:
	// "local" would unskip specs that ssh into the node. The log dump runs upstream's
	// cluster/log-dump scripts, which are not here.
	args := []string{
		"--provider=skeleton",
		"--kubeconfig=" + c.h.adminKC,
		"--kubectl-path=" + filepath.Join(c.h.Bin, "kubectl"),
		// The framework waits for this many Ready nodes before the suite.
		fmt.Sprintf("--num-nodes=%d", len(c.h.nodes)),
		"--report-dir=" + cf.report,
		"--e2e-output-dir=" + cf.report,
		"--disable-log-dump=true",
	}
	ginkgoArgs := []string{"--focus=" + cf.focus, "--timeout=" + cf.timeout, "--no-color", "-v"}
	if cf.skip != "" {
		ginkgoArgs = append(ginkgoArgs, "--skip="+cf.skip)
	}
	var cmd *exec.Cmd
	if cf.procs > 1 {
		// ginkgo's CLI runs the compiled suite in parallel processes and merges their reports.
		cmd = exec.CommandContext(ctx, filepath.Join(cf.dir, "ginkgo"),
			append(append(append([]string{fmt.Sprintf("--procs=%d", cf.procs)}, ginkgoArgs...), e2e, "--"), args...)...)
	} else {
		ga := make([]string, len(ginkgoArgs))
		for i, a := range ginkgoArgs {
			ga[i] = "--ginkgo." + strings.TrimLeft(a, "-")
		}
		cmd = exec.CommandContext(ctx, e2e, append(args, ga...)...)
	}
	cmd.Dir = cf.report
	// The manifest's own registries: the images were imported under those names.
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "KUBE_TEST_REPO") {
			cmd.Env = append(cmd.Env, e)
		}
	}
	logPath := filepath.Join(cf.report, "e2e.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return "", err
	}
	defer logFile.Close()
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	cmd.WaitDelay = 30 * time.Second
	junit := filepath.Join(cf.report, "junit_01.xml")
	_ = os.Remove(junit)
	logf("running the suite: %s (output in %s)", strings.Join(cmd.Args, " "), logPath)
	started := time.Now()
	if err := cmd.Start(); err != nil {
		return "", err
	}
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		progress(pr, logFile, started)
	}()
	runErr := cmd.Wait()
	pw.Close()
	<-copied
	took := time.Since(started)

	sel, err := newSelection(cf.focus, cf.skip)
	if err != nil {
		return "", err
	}
	res, err := readJUnit(junit, sel)
	if err != nil {
		return "", fmt.Errorf("the suite ended (%v) without a report: %w; see %s", runErr, err, logPath)
	}
	res.Proxy, res.Focus, res.Skip, res.Procs = cf.proxy, cf.focus, cf.skip, cf.procs
	res.Kubernetes = strings.TrimSpace(strings.TrimPrefix(string(version), "Kubernetes "))
	res.Started, res.Seconds = started.UTC().Round(time.Second), took.Round(time.Second).Seconds()
	res.Command = os.Getenv("CONFORMANCE_COMMAND")
	res.Build = os.Getenv("CONFORMANCE_BUILD")
	res.SuiteKey = filepath.Base(cf.dir)
	if runErr != nil && res.Failed == 0 {
		// No spec failed, yet e2e.test did (a suite timeout, a crash): that counts too.
		res.Specs = append(res.Specs, specResult{Name: "e2e.test", State: "failed", Message: runErr.Error()})
		res.Failed++
	}
	cf.res, cf.ran = res, true
	cf.passed, cf.fail = res.Passed, res.Failed
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(cf.report, "results.json"), append(b, '\n'), 0o644); err != nil {
		return "", err
	}
	for _, s := range res.Specs {
		line := fmt.Sprintf("  %-7s %6.1fs  %s", strings.ToUpper(s.State), s.Seconds, s.Name)
		if s.Message != "" {
			line += "\n            " + s.Message
		}
		logf("%s", line)
	}
	detail := fmt.Sprintf("%d passed, %d failed, %d skipped of %d selected (%d not selected) in %s with %s; %s",
		res.Passed, res.Failed, res.Skipped, len(res.Specs), res.NotRun, took.Round(time.Second), cf.proxy,
		filepath.Join(cf.report, "results.json"))
	if res.Failed > 0 || runErr != nil {
		return "", fmt.Errorf("%s (e2e.test: %v)", detail, runErr)
	}
	return detail, nil
}

// progress copies the suite's output to the log and prints its progress: each spec's result
// (ginkgo's "•" line and the spec's name on the line after it) and the final tally.
func progress(r io.Reader, log io.Writer, started time.Time) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	result := ""
	for sc.Scan() {
		l := sc.Text()
		fmt.Fprintln(log, l)
		t := strings.TrimSpace(l)
		switch {
		case result != "":
			logf("  suite %s: %s %s", time.Since(started).Round(time.Second), result, t)
			result = ""
		case strings.HasPrefix(t, "•"):
			result = t
		case strings.HasPrefix(t, "Ran ") || strings.HasPrefix(t, "Summarizing"):
			logf("  suite %s: %s", time.Since(started).Round(time.Second), t)
		}
	}
	_, _ = io.Copy(log, r)
}

// The JUnit report of the framework (junit_01.xml in --report-dir).
type junitSuites struct {
	Suites []struct {
		Cases []junitCase `xml:"testcase"`
	} `xml:"testsuite"`
}

type junitCase struct {
	Name    string  `xml:"name,attr"`
	Status  string  `xml:"status,attr"`
	Time    float64 `xml:"time,attr"`
	Skipped *struct {
		Message string `xml:"message,attr"`
	} `xml:"skipped"`
	Failure *junitText `xml:"failure"`
	Error   *junitText `xml:"error"`
}

type junitText struct {
	Message string `xml:"message,attr"`
	Type    string `xml:"type,attr"`
	Text    string `xml:",chardata"`
}

var leafPrefix = regexp.MustCompile(`^\[(It|SynchronizedBeforeSuite|BeforeSuite|SynchronizedAfterSuite|AfterSuite|ReportAfterSuite|ReportBeforeSuite|DeferCleanup[^\]]*)\]( |$)`)

// readJUnit turns the report into results: every spec that ran or skipped itself, and any
// suite node that failed; specs left out by focus and skip are counted, and those of the
// focus that sel's skip left out are listed with the alternative that matched.
func readJUnit(path string, sel *selection) (*results, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var js junitSuites
	if err := xml.Unmarshal(b, &js); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	res := &results{Specs: []specResult{}, Excluded: []excludedSpec{}}
	for _, s := range js.Suites {
		for _, tc := range s.Cases {
			m := leafPrefix.FindStringSubmatch(tc.Name)
			spec := m == nil || m[1] == "It"
			name := tc.Name
			if m != nil && m[1] == "It" {
				name = strings.TrimPrefix(tc.Name, m[0])
			}
			r := specResult{Name: strings.Join(strings.Fields(name), " "), Seconds: roundTenth(tc.Time)}
			switch {
			case tc.Failure != nil || tc.Error != nil:
				r.State = "failed"
				t := tc.Failure
				if t == nil {
					t = tc.Error
				}
				r.Message = firstLine(t.Message, t.Text, tc.Status)
				res.Failed++
			case tc.Skipped != nil || tc.Status == "skipped" || tc.Status == "pending":
				msg := ""
				if tc.Skipped != nil {
					msg = tc.Skipped.Message
				}
				why, ok := strings.CutPrefix(msg, "skipped - ")
				if !ok || !spec {
					res.NotRun++ // not selected (or a suite node with nothing to do)
					if term := sel.excludedBy(name); spec && term != "" {
						res.Excluded = append(res.Excluded, excludedSpec{Name: r.Name, Term: term})
					}
					continue
				}
				r.State, r.Message = "skipped", oneLine(why)
				res.Skipped++
			default:
				if !spec {
					continue // suite nodes that passed are not specs
				}
				r.State = "passed"
				res.Passed++
			}
			res.Specs = append(res.Specs, r)
		}
	}
	sort.Slice(res.Specs, func(i, j int) bool { return res.Specs[i].Name < res.Specs[j].Name })
	sort.Slice(res.Excluded, func(i, j int) bool { return res.Excluded[i].Name < res.Excluded[j].Name })
	return res, nil
}

// firstLine is a failure's first line: ginkgo's "[FAILED] ..." line when there is one.
func firstLine(msg, text, status string) string {
	for _, l := range strings.Split(text, "\n") {
		l = strings.TrimSpace(l)
		for _, p := range []string{"[FAILED] ", "[TIMEDOUT] ", "[PANICKED] ", "[INTERRUPTED] "} {
			if strings.HasPrefix(l, p) {
				return oneLine(l)
			}
		}
	}
	if m := oneLine(msg); m != "" {
		return m
	}
	for _, l := range strings.Split(text, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			return oneLine(l)
		}
	}
	return status
}

func oneLine(s string) string {
	s = strings.TrimSpace(strings.SplitN(strings.TrimSpace(s), "\n", 2)[0])
	if len(s) > 400 {
		s = s[:400] + "..."
	}
	return s
}

func roundTenth(f float64) float64 {
	v, _ := strconv.ParseFloat(strconv.FormatFloat(f, 'f', 1, 64), 64)
	return v
}

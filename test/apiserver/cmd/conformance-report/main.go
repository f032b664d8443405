// Command conformance-report writes docs/conformance.md from the results.json files of make
// conformance (test/apiserver/cmd/cluster-host/conformance.go): for each selection, one run
// with kube-proxy's IPVS mode, the reference column, and one with kube-ipvs, side by side per
// spec, with why each failure fails (hack/conformance/explained.txt) and why the skip leaves
// out what it leaves out (hack/conformance/sig-network-skip.txt, sig-network-others-skip.txt,
// serial-skip.txt and, for runs on fewer nodes than its terms need, nodes-skip.txt).
//
//	conformance-report [--results docs/conformance-results] [--hack hack/conformance] [--out docs/conformance.md]
//
// It reads RESULTS/SELECTION/PROXY.json (hack/conformance/run.sh publishes each run of a named
// selection there) for SELECTION services, sig-network-services, sig-network-others,
// sig-network-serial and sig-network-zones and PROXY kube-proxy and kube-ipvs;
// a missing file is a run not made ("not run"). Each failure
// without an explanation is marked on the page and named on stderr. The page is generated:
// edit this program or the hack/conformance text files, not the page.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
)

func main() {
	dir := flag.String("results", "docs/conformance-results", "the folder holding SELECTION/PROXY.json")
	hack := flag.String("hack", "hack/conformance", "the folder holding the skip files and explained.txt")
	out := flag.String("out", "docs/conformance.md", "the page to write (- for stdout)")
	flag.Parse()
	if err := run(*dir, *hack, *out); err != nil {
		fmt.Fprintln(os.Stderr, "conformance-report:", err)
		os.Exit(1)
	}
}

func run(dir, hack, out string) error {
	wideSkip, err := readSkipReasons(filepath.Join(hack, "sig-network-skip.txt"))
	if err != nil {
		return err
	}
	othersSkip, err := readSkipReasons(filepath.Join(hack, "sig-network-others-skip.txt"))
	if err != nil {
		return err
	}
	// A run on fewer nodes than a term of nodes-skip.txt needs also skips that term, after the
	// selection's own (hack/conformance/run.sh); the page gives each its reason and the nodes it
	// needs.
	fewNodes, err := readNodesSkip(filepath.Join(hack, "nodes-skip.txt"))
	if err != nil {
		return err
	}
	join := func(lists ...[]skipReason) []skipReason {
		var out []skipReason
		for _, l := range lists {
			out = append(out, l...)
		}
		return out
	}
	ex, err := readExplanations(filepath.Join(hack, "explained.txt"))
	if err != nil {
		return err
	}
	const wide = "Every `[sig-network]` spec (the focus of upstream's kube-proxy IPVS job), less the skip\n" +
		"terms below: upstream's, `[Serial]` and `[Disruptive]`, and what this cluster without a\n" +
		"cloud or a route out cannot run (specs that need more nodes than the run has are left out by\n" +
		"name, each term with the nodes it needs; the others skip themselves at run time and are\n" +
		"listed with the reason they gave). `make conformance SELECTION=sig-network` runs it in one\n" +
		"go; this page shows it in two halves, each run by both proxies on the same build one after\n" +
		"the other, because both proxies' runs of all of it on the emulated node do not fit, after a\n" +
		"fresh machine's 40-minute build, in the three hours a job gets on this project's 2-core\n" +
		"machines (docs/conformance-build.md has the times)."
	serialSkip, err := readSkipReasons(filepath.Join(hack, "serial-skip.txt"))
	if err != nil {
		return err
	}
	var notSerial []skipReason
	for _, r := range wideSkip {
		if r.Term != `\[Serial\]` {
			notSerial = append(notSerial, r)
		}
	}
	pg := page{Explained: ex, Selections: []selectionRuns{
		{
			Key:   "services",
			Title: "Services [Conformance]: `make conformance`",
			Intro: "The 15 `[sig-network] Services` specs tagged `[Conformance]`, the ones every certified\n" +
				"cluster passes.",
		},
		{
			Key:       "sig-network-services",
			Title:     "[sig-network], first half: `make conformance SELECTION=sig-network-services`",
			Intro:     wide + "\n\nThis half is the `[sig-network] Services ...` specs: focus `\\[sig-network\\] Services\\s`.",
			Skip:      join(wideSkip, fewNodes),
			SkipFiles: "sig-network-skip.txt and nodes-skip.txt",
		},
		{
			Key:   "sig-network-others",
			Title: "[sig-network], second half: `make conformance SELECTION=sig-network-others`",
			Intro: "Every other spec of the wide selection (the first half says what it is): the same focus\n" +
				"and skip, and the first half's specs skipped as well.",
			Skip:      join(wideSkip, othersSkip, fewNodes),
			SkipFiles: "sig-network-skip.txt, sig-network-others-skip.txt and nodes-skip.txt",
		},
		{
			Key:   "sig-network-serial",
			Title: "[sig-network] [Serial]: `make conformance SELECTION=sig-network-serial`",
			Intro: "The `[Serial]` specs of the wide selection's focus, which its two halves leave out: each\n" +
				"must run alone on the cluster, so this run has one ginkgo process. The rest of the skip\n" +
				"holds, and the `[Serial]` specs this cluster cannot run are left out by name.",
			Skip:      join(notSerial, serialSkip, fewNodes),
			SkipFiles: "sig-network-skip.txt but its `\\[Serial\\]`, serial-skip.txt and nodes-skip.txt",
		},
		{
			Key:   "sig-network-zones",
			Title: "[sig-network], three zones: `make conformance SELECTION=sig-network-zones NODES=6`",
			Intro: "The specs of the wide selection's focus that need three zones with two schedulable nodes\n" +
				"each (the terms of hack/conformance/nodes-skip.txt for six nodes), which the other\n" +
				"selections leave out by name on fewer nodes: here on six nodes, zone-a, zone-b and zone-c\n" +
				"two each, with the wide selection's skip.",
			Skip:      wideSkip,
			SkipFiles: "sig-network-skip.txt",
		},
	}}
	for i := range pg.Selections {
		s := &pg.Selections[i]
		if s.KubeProxy, err = readResults(filepath.Join(dir, s.Key, kubeProxy+".json")); err != nil {
			return err
		}
		if s.KubeIPVS, err = readResults(filepath.Join(dir, s.Key, kubeIPVS+".json")); err != nil {
			return err
		}
	}
	text, unexplained := render(pg)
	for _, u := range unexplained {
		fmt.Fprintln(os.Stderr, "conformance-report: failure not explained in explained.txt:", u)
	}
	for _, e := range unused(pg) {
		fmt.Fprintf(os.Stderr, "conformance-report: explained.txt explains a failure no run has: %s: %s\n", e.Proxy, e.Spec)
	}
	if out == "-" {
		_, err := fmt.Print(text)
		return err
	}
	return os.WriteFile(out, []byte(text), 0o644)
}

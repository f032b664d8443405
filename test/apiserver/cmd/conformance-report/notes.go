package main

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// The hand-kept text the generated page quotes: why each skip term leaves its specs out
// (hack/conformance/sig-network-skip.txt and the others, nodes-skip.txt with the nodes each
// term's specs need) and why a spec failed (hack/conformance/explained.txt). All are
// tab-separated lines; # starts a comment.

// skipReason is one term of a selection's skip and why it is there.
type skipReason struct {
	Term, Why string
	// MinNodes, for a term of nodes-skip.txt, is the fewest nodes its specs need: the skip
	// holds the term only on a cluster of fewer nodes. 0 for the other files' terms.
	MinNodes int
}

// explanation says why a spec fails for a proxy ("both" for either): an environment limit
// shown by both proxies failing, a deliberate difference, or a known kube-proxy problem.
type explanation struct {
	Proxy, Spec, Why string
}

// readSkipReasons reads "term<TAB>reason" lines.
func readSkipReasons(path string) ([]skipReason, error) {
	var out []skipReason
	err := readFields(path, 2, func(f []string) { out = append(out, skipReason{Term: f[0], Why: f[1]}) })
	return out, err
}

// readNodesSkip reads nodes-skip.txt's "MIN<TAB>term<TAB>reason" lines; MIN is 2 or more (a
// term for one node would be in no run's skip).
func readNodesSkip(path string) ([]skipReason, error) {
	var out []skipReason
	var bad error
	err := readFields(path, 3, func(f []string) {
		n, err := strconv.Atoi(f[0])
		if (err != nil || n < 2) && bad == nil {
			bad = fmt.Errorf("%s: %q: nodes %q: want a number, 2 or more", path, f[1], f[0])
		}
		out = append(out, skipReason{Term: f[1], Why: f[2], MinNodes: n})
	})
	if err != nil {
		return nil, err
	}
	if bad != nil {
		return nil, bad
	}
	return out, nil
}

// readExplanations reads "proxy<TAB>spec<TAB>why" lines; proxy is kube-proxy, kube-ipvs or both.
func readExplanations(path string) ([]explanation, error) {
	var out []explanation
	err := readFields(path, 3, func(f []string) { out = append(out, explanation{Proxy: f[0], Spec: f[1], Why: f[2]}) })
	if err != nil {
		return nil, err
	}
	for _, e := range out {
		switch e.Proxy {
		case "kube-proxy", "kube-ipvs", "both":
		default:
			return nil, fmt.Errorf("%s: %q: proxy %q: want kube-proxy, kube-ipvs or both", path, e.Spec, e.Proxy)
		}
	}
	return out, nil
}

// readFields calls add with the n tab-separated fields of each line that is neither empty nor
// a comment; a line with another number of fields is an error.
func readFields(path string, n int, add func([]string)) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		t := sc.Text()
		if strings.TrimSpace(t) == "" || strings.HasPrefix(t, "#") {
			continue
		}
		fields := strings.Split(t, "\t")
		if len(fields) != n {
			return fmt.Errorf("%s:%d: want %d tab-separated fields, got %d", path, line, n, len(fields))
		}
		for i := range fields {
			fields[i] = strings.TrimSpace(fields[i])
		}
		add(fields)
	}
	return sc.Err()
}

// why returns the explanation of a spec's failure for proxy, or "".
func why(ex []explanation, proxy, name string) string {
	for _, e := range ex {
		if e.Spec == name && (e.Proxy == proxy || e.Proxy == "both") {
			return e.Why
		}
	}
	return ""
}

// unused returns the explanations that match no failure of the page's runs: a spec that
// passes now, or a name that changed.
func unused(pg page) []explanation {
	var out []explanation
	for _, e := range pg.Explained {
		used := false
		for _, s := range pg.Selections {
			for _, r := range []*results{s.KubeProxy, s.KubeIPVS} {
				if r != nil && (e.Proxy == "both" || e.Proxy == r.Proxy) && isState(r, e.Spec, "failed") {
					used = true
				}
			}
		}
		if !used {
			out = append(out, e)
		}
	}
	return out
}

package bench

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"
)

// Raw is the report's one results file: what a make bench run measured, kube-ipvs' and
// kube-proxy's, and the commit the bench was built from.
type Raw struct {
	Commit    string             `json:"commit,omitempty"`
	KubeIPVS  []*Result          `json:"kube_ipvs"`
	KubeProxy []*KubeProxyResult `json:"kube_proxy,omitempty"`
}

// CommitPrefix starts the console log's line that names the commit the bench was built from
// (hack/bench.sh writes it before the guest boots).
const CommitPrefix = "=== bench: commit "

// ReadRaw reads a run's results: from a console log (result lines anywhere in it), or from
// the results file Report writes.
func ReadRaw(path string) (*Raw, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	raw := &Raw{}
	if t := bytes.TrimSpace(b); len(t) > 0 && t[0] == '{' {
		if err := json.Unmarshal(t, raw); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	} else if raw, err = parseConsole(b); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(raw.KubeIPVS) == 0 {
		return nil, fmt.Errorf("%s: no results", path)
	}
	sort.SliceStable(raw.KubeIPVS, func(i, j int) bool {
		a, b := raw.KubeIPVS[i], raw.KubeIPVS[j]
		if a.N != b.N {
			return a.N < b.N
		}
		return a.BindingOf() < b.BindingOf()
	})
	sort.SliceStable(raw.KubeProxy, func(i, j int) bool { return raw.KubeProxy[i].N < raw.KubeProxy[j].N })
	return raw, nil
}

// parseConsole reads the result lines and the commit line of a guest's console log.
func parseConsole(b []byte) (*Raw, error) {
	raw := &Raw{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), "\r")
		if c, ok := strings.CutPrefix(line, CommitPrefix); ok {
			raw.Commit = strings.TrimSpace(c)
		}
		if _, js, ok := strings.Cut(line, ResultPrefix); ok {
			var r Result
			if err := json.Unmarshal([]byte(js), &r); err != nil {
				return nil, fmt.Errorf("a result line: %w", err)
			}
			raw.KubeIPVS = append(raw.KubeIPVS, &r)
		}
		if _, js, ok := strings.Cut(line, KubeProxyPrefix); ok {
			var k KubeProxyResult
			if err := json.Unmarshal([]byte(js), &k); err != nil {
				return nil, fmt.Errorf("a kube-proxy result line: %w", err)
			}
			raw.KubeProxy = append(raw.KubeProxy, &k)
		}
	}
	return raw, sc.Err()
}

// Report reads results and writes the markdown report, the chart and the results as JSON.
func Report(in, md, pngPath, js string) error {
	raw, err := ReadRaw(in)
	if err != nil {
		return err
	}
	rs := raw.KubeIPVS
	for _, p := range []string{md, pngPath, js} {
		if dir := filepath.Dir(p); dir != "." {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
		}
	}
	b, err := json.MarshalIndent(raw, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(js, append(b, '\n'), 0o644); err != nil {
		return err
	}
	var img bytes.Buffer
	main, _ := splitGate(rs)
	if err := WriteChart(&img, main); err != nil {
		return err
	}
	if err := os.WriteFile(pngPath, img.Bytes(), 0o644); err != nil {
		return err
	}
	var doc bytes.Buffer
	if err := WriteMarkdown(&doc, rs, Env{Date: time.Now().UTC(), HostCPU: hostCPU(), HostCores: runtime.NumCPU(),
		Chart: relTo(md, pngPath), Data: relTo(md, js), KubeProxy: raw.KubeProxy, Commit: raw.Commit}); err != nil {
		return err
	}
	return os.WriteFile(md, doc.Bytes(), 0o644)
}

func relTo(from, to string) string {
	if r, err := filepath.Rel(filepath.Dir(from), to); err == nil {
		return filepath.ToSlash(r)
	}
	return to
}

// Env is what the report says about where it was made.
type Env struct {
	Date      time.Time
	HostCPU   string
	HostCores int
	Chart     string // the chart's path relative to the report
	Data      string // the JSON's path relative to the report
	// KubeProxy is kube-proxy's IPVS proxier measured in the same run (none: the
	// comparison quotes kube-proxy's issues instead).
	KubeProxy []*KubeProxyResult
	// Commit is the commit the bench was built from ("": not recorded).
	Commit string
}

func hostCPU() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

// kindNames are the table labels of the single changes.
var kindNames = map[string]string{
	KindEndpointAdd:    "one endpoint added",
	KindEndpointRemove: "one endpoint removed (drained)",
	KindNoop:           "sync with nothing to change",
	KindServiceAdd:     "one Service added (10 endpoints)",
	KindServiceDelete:  "one Service deleted",
	KindFullResync:     "full resync (every Service, kernel dump)",
}

func ms(s float64) string {
	switch {
	case math.IsNaN(s):
		return "-"
	case s >= 10:
		return fmt.Sprintf("%.1f s", s)
	case s >= 1:
		return fmt.Sprintf("%.2f s", s)
	}
	return fmt.Sprintf("%.0f ms", 1000*s)
}

func spread(xs []float64) string {
	s := Summarize(xs)
	if s.N == 0 {
		return "-"
	}
	return fmt.Sprintf("%s (%s–%s)", ms(s.Median), ms(s.Min), ms(s.Max))
}

func mibs(b uint64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }

func writesBy(w map[string]int) string {
	var parts []string
	for _, s := range Subsystems {
		if w[s] > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", s, w[s]))
		}
	}
	if len(parts) == 0 {
		return "0"
	}
	return strings.Join(parts, ", ")
}

// medianWrites is the writes of the sample with the median total, by subsystem.
func medianWrites(samples []Sample) (total string, by string) {
	if len(samples) == 0 {
		return "-", "-"
	}
	s := append([]Sample(nil), samples...)
	sort.Slice(s, func(i, j int) bool { return s[i].TotalWrites() < s[j].TotalWrites() })
	lo, hi := s[0].TotalWrites(), s[len(s)-1].TotalWrites()
	m := s[len(s)/2]
	total = fmt.Sprint(m.TotalWrites())
	if lo != hi {
		total += fmt.Sprintf(" (%d–%d)", lo, hi)
	}
	return total, writesBy(m.Writes)
}

func sinceField(xs []Sample, f func(Sample) float64) []float64 {
	out := make([]float64, 0, len(xs))
	for _, s := range xs {
		out = append(out, f(s))
	}
	return out
}

func commas(n int) string {
	s := fmt.Sprint(n)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

func label(n int) string {
	if n%1000 == 0 {
		return fmt.Sprintf("%dk", n/1000)
	}
	return fmt.Sprint(n)
}

// WriteMarkdown writes BENCHMARKS.md.
func WriteMarkdown(w io.Writer, rs []*Result, env Env) error {
	if len(rs) == 0 {
		return errors.New("no results")
	}
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	rs, otherGate := splitGate(rs)
	first, last := rs[0], rs[len(rs)-1]
	primary := primaryResults(rs)

	p("# Benchmarks\n\n")
	at := "the working tree of the report"
	if env.Commit != "" {
		at = "commit " + env.Commit
	}
	p("Scale of kube-ipvs from %s to %s Services (x %d endpoints), on a real kernel: one `make bench`\n",
		commas(first.N), commas(last.N), EndpointsPerService)
	p("run of kube-ipvs at %s, in one guest boot, rendered %s. Every table below\n", at, env.Date.Format("2006-01-02"))
	p("is generated from that run's results, which are in [%s](%s).\n\n", env.Data, env.Data)
	p("![per-change latency and cold start against the number of Services](%s)\n\n", env.Chart)

	p("## Machine\n\n")
	p("- Guest: QEMU **software emulation (TCG)**, %d vCPUs, %s MiB, Debian kernel `%s`.\n",
		last.CPUs, commas(last.MemTotalMiB), last.Kernel)
	p("- Host: %s, %d cores, which emulate the guest's vCPUs.\n", env.HostCPU, env.HostCores)
	p("- %s; kube-ipvs at %s.\n\n", last.GoVersion, at)
	p("**Every time in this file is under emulation.** TCG translates the guest's instructions\n")
	p("and looks every memory access up in a software TLB, so a real node is roughly ten times\n")
	p("faster on the proxy's own code and more than that in the kernel, whose netlink, address-list\n")
	p("and IPVS-table walks are memory-bound (a netlink request costs about 160 µs here). Emulated\n")
	p("times are also noisy. Compare ratios (between N, between the proxies, against the idle\n")
	p("median), not absolute times; medians and spreads are given, and both proxies ran in the\n")
	p("same boot.\n\n")

	writeWhatRuns(w, rs, otherGate)

	writeColdStart(w, rs)

	p("## One change\n\n")
	p("Median (min–max) over the repetitions; the last column is the controller's own sync time\n")
	p("(median), without the API call and the informer delivery.\n\n")
	p("| change | Services | repetitions | latency | of which api | writes | by subsystem | sync |\n")
	p("|---|---:|---:|---:|---:|---:|---|---:|\n")
	for _, k := range Kinds {
		for _, r := range primary {
			ss := r.Changes[k]
			total, by := medianWrites(ss)
			p("| %s | %s | %d | %s | %s | %s | %s | %s |\n", kindNames[k], commas(r.N), len(ss),
				spread(r.Latencies(k)), ms(Summarize(sinceField(ss, func(s Sample) float64 { return s.APISeconds })).Median),
				total, by, ms(Summarize(sinceField(ss, func(s Sample) float64 { return s.SyncSeconds })).Median))
		}
	}
	p("\n")

	writeChurn(w, rs)
	writeGate(w, rs, otherGate)
	writeMemory(w, rs)
	writeTargets(w, rs)
	if len(env.KubeProxy) > 0 {
		writeKubeProxy(w, primary, env.KubeProxy)
	} else {
		writeComparison(w, primary)
	}
	writeDesign(w, rs)
	writeLimits(w, rs)

	p("## Reproduce\n\n")
	p("```sh\n")
	p("make bench                                   # the default plan: 1k, 10k, 50k in both bindings, 5k address, the gate compared at 10k and 50k, kube-proxy at 1k and 5k\n")
	p("BENCH_PLAN=\"1000:9:1 10000:7:1:route\" make bench   # N:repetitions:full-repair repetitions[:binding[:gate]]\n")
	p("BENCH_REPORT_ONLY=1 make bench                # the report again from .cache/bench/console.log\n")
	p("BENCH_KUBEPROXY_PLAN=\"1000\" make bench       # kube-proxy's IPVS proxier beside it at these N (\"\": none)\n")
	p("BENCH_ARGS=\"-cpuprofile -heapprofile\" make bench  # profiles on the console (base64); default -rate-estimation off\n")
	p("```\n\n")
	p("`hack/bench.sh` builds `bench/cmd/kipvs-bench` (static), boots the guest through\n")
	p("`hack/guest/run.sh` with `GUEST_MEM=6144` and `GUEST_TIMEOUT=10800`, runs one process per N and binding\n")
	p("in its own network namespace, then renders this file, the chart and the JSON with\n")
	p("`kipvs-bench report`. It is not part of `make test`. The limits found are tested on every\n")
	p("`make test`: `controller/scale_test.go`, `firewall/packed_test.go`, `ipvs/batch_test.go`,\n")
	p("`ipvs/share_test.go`, `dataplane/ipvsmode/ipvsmode_test.go`, and in the guest\n")
	p("`ipvs/scale_guest_test.go` and `dummyif/scale_guest_test.go`.\n")
	return nil
}

func result(rs []*Result, n int) *Result {
	for _, r := range rs {
		if r.N == n {
			return r
		}
	}
	return nil
}

func passFail(ok bool) string {
	if ok {
		return "pass"
	}
	return "**miss**"
}

func writeComparison(w io.Writer, rs []*Result) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	last := rs[len(rs)-1]
	vs := last.Found.VirtualServers
	p("## Compared with kube-proxy's IPVS mode\n\n")
	p("Figures from kube-proxy's issues (see the project's reference notes); kube-proxy was not run\n")
	p("here.\n\n")
	p("| | kube-proxy IPVS mode | kube-ipvs, this bench at %s Services |\n|---|---|---|\n", commas(last.N))
	addW, _ := medianWrites(last.Changes[KindEndpointAdd])
	p("| work per endpoint change | a full sync: about 3 netlink round trips per virtual server plus about 55 process execs, so about %s round trips for %s virtual servers | %s writes (the real server and its hairpin entry), no reads, no process |\n",
		commas(3*vs), commas(vs), addW)
	p("| time per update | about 20 s at 4,000 endpoints (#73382); 12 s syncs at 1,500 externalIP Services (#84906) | %s median at %s endpoints, under emulation |\n",
		ms(Summarize(last.Latencies(KindEndpointAdd)).Median), commas(last.N*EndpointsPerService))
	p("| idle cost | 2,000 Services keep 65%% of a core busy (#88212): a full sync every 30 s and after every change | a change-free sync writes nothing; the periodic repair (full resync) took %s at %s Services, every --sync-period (30 s by default) |\n",
		ms(Summarize(last.Latencies(KindFullResync)).Median), commas(last.N))
	p("| ipset size | maxelem fixed at 65,536 (#129389); filled one exec per entry (#133773) | sets sized to their content: %s hairpin entries in a set of maxelem %s, filled %d entries per netlink request |\n\n",
		commas(last.Found.SetEntries["KIPVS-LOOP-BACK"]), commas(last.Found.LoopBackMaxElem), 500)
}

// writeWhatRuns says what the bench runs and how it measures.
func writeWhatRuns(w io.Writer, rs, otherGate []*Result) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	p("## What runs\n\n")
	p("For each N and each `--vip-binding` (address, the default, and route), `kipvs-bench run`\n")
	p("in a fresh network namespace of the guest (its own IPVS table, `kube-ipvs0`, ipsets and\n")
	p("iptables, and a node address on a dummy `eth0`):\n\n")
	p("- client-go's plain **fake clientset** (as `--manifests` uses) holding N Services and N\n")
	p("  EndpointSlices (%d ready endpoints each): every Service a ClusterIP with port 80, 10%%\n", EndpointsPerService)
	p("  also 443, 20%% NodePort (half of those with both ports), as if the API server had them\n")
	p("  when the proxy starts;\n")
	p("- the informers, `controller.New`, and the real IPVS, `kube-ipvs0`, ipset and iptables\n")
	p("  dataplane built by `dataplane/ipvsmode.New`, the code `cmd/kube-ipvs` builds it\n")
	p("  with; the production observers (metrics, health); `--min-sync-period=0`, so that each\n")
	p("  change is applied alone (the default 1 s only adds coalescing delay), and no periodic\n")
	p("  resync during the single changes (it is measured on its own, triggered by a Node change);\n")
	p("- **latency** runs from the clientset call to the kernel showing the change, read through\n")
	p("  a separate IPVS netlink socket every 2 ms (the controller's word is used only for the\n")
	p("  no-op sync and the full resync, which change nothing the kernel could show); it includes\n")
	p("  the fake clientset's own work (listed as *api*) and the informer's delivery. The probe\n")
	p("  builds its requests from the kernel's uapi, not from package ipvs, and reads into one\n")
	p("  buffer (it runs in the proxy's process, and its garbage would be the proxy's collector's);\n")
	p("  its reads take the kernel's IPVS mutex, as `ipvsadm` does;\n")
	p("- **writes** are the controller's `kube_ipvs_netlink_writes_total` by subsystem: IPVS and\n")
	p("  address netlink requests, ipset requests (one per batch of up to 500 entries), iptables\n")
	p("  restore runs;\n")
	p("- one endpoint change adds a ready endpoint to a one-port ClusterIP Service and then\n")
	p("  removes it (its real server drains at weight 0 and is deleted once it has no\n")
	p("  connection, a second later; that delete is counted); a Service is added as a Service\n")
	p("  then its EndpointSlice, and deleted as the Service then, once the kernel dropped it,\n")
	p("  the slice;\n")
	p("- after the cold start the kernel is read back in full and compared with what N Services\n")
	p("  must give (virtual and real servers, VIPs, set entries);\n")
	p("- after the single changes the controller is stopped and a new one started onto the\n")
	p("  kernel state (a restart), with `--sync-period`'s default, and endpoint changes stream in\n")
	p("  through two of its repair cycles (Churn).\n")
	p("%s", rateEstimationText(rs))
	if len(otherGate) > 0 {
		p("- kube-ipvs ran with its foreground gate %s; the churn also ran with it %s at %s (The\n", rs[0].GateOf(), otherGate[0].GateOf(), gateRuns(otherGate))
		p("  foreground gate).\n")
	}
	p("\n")
}

// gateRuns names the runs made with the other gate setting.
func gateRuns(rs []*Result) string {
	var out []string
	for _, r := range rs {
		out = append(out, fmt.Sprintf("%s %s", label(r.N), r.BindingOf()))
	}
	return strings.Join(out, " and ")
}

// addressText says how much of the largest N's cold start binding the addresses took, or ""
// without phases.
func addressText(rs []*Result) string {
	if len(rs) == 0 {
		return ""
	}
	last := rs[len(rs)-1]
	ph := last.ColdStart.PhaseSeconds
	if len(ph) == 0 {
		return ""
	}
	return fmt.Sprintf(" At %s, binding the addresses took %s of the %s cold start (they are\n"+
		"  bound beside the sets, the rules and IPVS).", label(last.N), ms(ph["addresses"]), ms(last.ColdStart.Seconds))
}

// phaseText is ", of which build x, firewall y, ..." for the last full resync sample of r
// that has phases, or "" without one.
func phaseText(r *Result) string {
	samples := r.Changes[KindFullResync]
	for i := len(samples) - 1; i >= 0; i-- {
		ph := samples[i].PhaseSeconds
		if len(ph) == 0 {
			continue
		}
		return fmt.Sprintf(" (the last one: recomputing every Service %s, ipsets and iptables %s, then at once `kube-ipvs0` %s and IPVS %s)",
			ms(ph["build"]), ms(ph["firewall"]), ms(ph["addresses"]), ms(ph["ipvs"]))
	}
	return ""
}

// rateEstimationText is the bullet that says which runs set --ipvs-rate-estimation, if any.
func rateEstimationText(rs []*Result) string {
	by := map[string][]string{}
	var order []string
	for _, r := range rs {
		v := r.RateEstimation
		if v == "" {
			v = "kernel"
		}
		if by[v] == nil {
			order = append(order, v)
		}
		by[v] = append(by[v], fmt.Sprintf("%s %s", label(r.N), r.BindingOf()))
	}
	if len(order) == 1 && order[0] == "kernel" {
		return ""
	}
	if len(order) == 1 {
		return "- kube-ipvs ran with `--ipvs-rate-estimation=" + order[0] + "` throughout (off is what the README advises at tens\n" +
			"  of thousands of Services on kernels before 6.2; kube-proxy ran with the kernel's own, on).\n"
	}
	var parts []string
	for _, v := range order {
		parts = append(parts, fmt.Sprintf("`--ipvs-rate-estimation=%s` at %s", v, strings.Join(by[v], ", ")))
	}
	return "- kube-ipvs ran with " + strings.Join(parts, "; ") + " (off is what the README advises at tens\n" +
		"  of thousands of Services on kernels before 6.2; kube-proxy ran with the kernel's own, on).\n"
}

package bench

import (
	"bytes"
	"encoding/json"
	"image/png"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/kube-ipvs/kube-ipvs/model"
	"github.com/kube-ipvs/kube-ipvs/proxy"
)

// The synthetic cluster has the announced shape, and Expect counts what the proxy builds
// for it.
func TestSyntheticClusterShapeAndExpectations(t *testing.T) {
	const n = 1000
	e := Expect(n)
	if e.VirtualServers != 1400 || e.RealServers != 14000 || e.LoopBackEntries != 11000 || e.NodePortEntries != 300 {
		t.Fatalf("Expect(%d) = %+v", n, e)
	}
	cfg := &proxy.Config{DefaultScheduler: "rr", NodeName: NodeName, NodeIPs: []netip.Addr{NodeIP}}
	vses, reals, twoPorts, nodePorts := 0, 0, 0, 0
	seenIP, seenPort := map[netip.Addr]bool{}, map[uint16]bool{}
	for i := range n {
		svc, sl := Service(i), EndpointSlice(i, DefaultEndpoints()...)
		st := proxy.BuildService(svc, []*discoveryv1.EndpointSlice{sl}, cfg)
		if len(st.Reasons) != 0 {
			t.Fatalf("Service %d: problems %v", i, st.Reasons)
		}
		vses += len(st.VSes)
		for _, vs := range st.VSes {
			reals += len(vs.Reals)
		}
		if ShapeOf(i).TwoPorts {
			twoPorts++
		}
		if ShapeOf(i).NodePort {
			nodePorts++
			for p := range ShapeOf(i).Ports() {
				if seenPort[NodePort(i, p)] {
					t.Fatalf("node port %d used twice", NodePort(i, p))
				}
				seenPort[NodePort(i, p)] = true
				if NodePort(i, p) > NodePortMax {
					t.Fatalf("node port %d above %d", NodePort(i, p), NodePortMax)
				}
			}
		}
		if seenIP[ClusterIP(i)] {
			t.Fatalf("ClusterIP %v used twice", ClusterIP(i))
		}
		seenIP[ClusterIP(i)] = true
	}
	if vses != e.VirtualServers || reals != e.RealServers {
		t.Errorf("built %d virtual and %d real servers, Expect says %d and %d", vses, reals, e.VirtualServers, e.RealServers)
	}
	if twoPorts != n/10 || nodePorts != n/5 {
		t.Errorf("%d two-port and %d NodePort Services of %d", twoPorts, nodePorts, n)
	}
	// 50,000 Services fit the address ranges: the last endpoint of the last Service stays in
	// the pod network and its node ports in range.
	if last := EndpointIP(49999+5*10, 15); !ClusterCIDR.Contains(last) {
		t.Errorf("endpoint %v outside %v", last, ClusterCIDR)
	}
	if HTTPKey(7) != (model.VSKey{Addr: ClusterIP(7), Proto: model.TCP, Port: 80}) {
		t.Error("HTTPKey")
	}
}

func TestSummarize(t *testing.T) {
	s := Summarize([]float64{3, 1, 2, 10})
	if s.N != 4 || s.Median != 2.5 || s.Min != 1 || s.Max != 10 {
		t.Errorf("%+v", s)
	}
	if s := Summarize([]float64{5, 1, 3}); s.Median != 3 {
		t.Errorf("odd median %+v", s)
	}
	if s := Summarize(nil); s.N != 0 || !math.IsNaN(s.Median) {
		t.Errorf("empty %+v", s)
	}
}

func fakeResult(n int, scale float64) *Result {
	r := &Result{N: n, Kernel: "6.1.0-test", CPUs: 2, MemTotalMiB: 6000, GoVersion: "go1.26", Expected: Expect(n),
		Changes: map[string][]Sample{}, PeakRSSBytes: uint64(scale*100) << 20, HeapAPIBytes: uint64(scale*10) << 20,
		HeapLiveBytes: uint64(scale*40) << 20, HeapPeakBytes: uint64(scale*90) << 20}
	e := r.Expected
	r.Found = KernelCounts{VirtualServers: e.VirtualServers, RealServers: e.RealServers, Addresses: e.Addresses,
		SetEntries: map[string]int{"KIPVS-LOOP-BACK": e.LoopBackEntries}, LoopBackMaxElem: 2 * e.LoopBackEntries}
	r.ColdStart = Sample{Seconds: 6 * scale, Writes: map[string]int{"ipvs": e.VirtualServers + e.RealServers, "address": n, "ipset": 50, "iptables": 2}}
	for i, k := range Kinds {
		for j := range 5 {
			w := map[string]int{"ipvs": 1, "ipset": 1}
			if k == KindNoop || k == KindFullResync {
				w = map[string]int{}
			}
			r.Changes[k] = append(r.Changes[k], Sample{Seconds: 0.03 + 0.01*float64(i+j), APISeconds: 0.02, Writes: w, SyncSeconds: 0.005})
		}
	}
	r.Restart = &Sample{Seconds: 3 * scale, Writes: map[string]int{}}
	return r
}

// withChurn makes r a route-binding result with a churn whose p99 is p99 seconds.
func withChurn(r *Result, p99 float64) *Result {
	r.Binding = "route"
	r.RepairStep = 200
	c := &Churn{Rate: 5, Seconds: 100, Changes: 100, Writes: map[string]int{"ipvs": 150, "ipset": 100},
		Cycles: []Cycle{{EndedAt: 40, Seconds: 10, LongestStep: 0.02}, {EndedAt: 90, Seconds: 10, LongestStep: 0.02}}}
	for i := range 100 {
		c.Latencies = append(c.Latencies, 0.02)
		c.SentAt = append(c.SentAt, float64(i))
	}
	c.Latencies[99] = p99
	c.Latencies[98] = p99
	r.Churn = c
	return r
}

// The report reads result lines from a console log, and writes a chart that decodes and a
// markdown file with every section and the targets judged.
func TestReportFromConsoleLog(t *testing.T) {
	dir := t.TempDir()
	var log bytes.Buffer
	log.WriteString("=== bench: kernel 6.1.0-test\nnoise\n" + CommitPrefix + "abc1234\n")
	for _, r := range []*Result{fakeResult(10000, 9), fakeResult(1000, 1), fakeResult(50000, 50),
		withChurn(fakeResult(1000, 1), 0.05), withChurn(fakeResult(50000, 50), 0.5)} {
		b, _ := json.Marshal(r)
		log.WriteString("[  12.3] " + ResultPrefix + string(b) + "\r\n")
	}
	in := filepath.Join(dir, "console.log")
	if err := os.WriteFile(in, log.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	md, img, js := filepath.Join(dir, "BENCHMARKS.md"), filepath.Join(dir, "docs", "bench.png"), filepath.Join(dir, "docs", "bench.json")
	if err := Report(in, md, img, js); err != nil {
		t.Fatal(err)
	}
	raw, err := ReadRaw(js)
	if err != nil {
		t.Fatal(err)
	}
	rs := raw.KubeIPVS
	if raw.Commit != "abc1234" || len(rs) != 5 || rs[0].N != 1000 || rs[0].BindingOf() != "address" || rs[1].Binding != "route" || rs[4].N != 50000 {
		t.Fatalf("the JSON reads back as %d results (%v)", len(rs), err)
	}
	f, err := os.Open(img)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if p, err := png.Decode(f); err != nil || p.Bounds().Dx() != chartW {
		t.Fatalf("chart: %v", err)
	}
	doc, _ := os.ReadFile(md)
	for _, want := range []string{"## Machine", "## Cold start and restart", "## One change", "## Churn", "## Memory", "## Targets",
		"| 50,000 | route | 100 | 100.0 s | 2: 10.0 s, 20 ms; 10.0 s, 20 ms |", "during cycles",
		"## Compared with kube-proxy", "## Reproduce", "at commit abc1234", "docs/bench.png", "| 50,000 |", "9.0x"} {
		if !strings.Contains(string(doc), want) {
			t.Errorf("the report lacks %q", want)
		}
	}
	// 50x the time for 50x the Services passes with routes; 50 x 100 MiB RSS does not; a
	// churn p99 of 50 ms against an idle 50 ms passes, 500 ms does not.
	for _, want := range []string{"route binding <= 60 | 300.0 s / 6.00 s = 50.0 (N grew 50x) | pass |",
		"| peak RSS at 50k, the store counted apart, <= 700 MiB |", "1k route: 50 ms vs 50 ms (1.0x, 2 cycles); 50k route: 500 ms vs 50 ms (10.0x, 2 cycles) | **miss** |",
		"| churn p99 at 50k <= 2 x at 1k (route) | 500 ms vs 50 ms (10.00x) | **miss** |"} {
		if !strings.Contains(string(doc), want) {
			t.Errorf("targets judged wrongly: no %q in\n%s", want, doc)
		}
	}
}

// Runs with the other foreground-gate setting stay out of the main tables and are compared
// with their twin in a section of their own.
func TestReportComparesTheGate(t *testing.T) {
	off := func(r *Result) *Result { r.ForegroundGate = "off"; return r }
	all := []*Result{off(withChurn(fakeResult(1000, 1), 0.05)), off(withChurn(fakeResult(50000, 50), 0.1)), withChurn(fakeResult(50000, 50), 0.2)}
	main, other := splitGate(all)
	if len(main) != 2 || len(other) != 1 || other[0].GateOf() != "on" {
		t.Fatalf("split: %d main, %d other", len(main), len(other))
	}
	var b bytes.Buffer
	if err := WriteMarkdown(&b, all, Env{}); err != nil {
		t.Fatal(err)
	}
	doc := b.String()
	for _, want := range []string{"## The foreground gate", "| 50,000 | route | on | 100 |", "| 50,000 | route | off | 100 |",
		"- 50k (route): p99 200 ms with the gate, 100 ms without (without / with: 0.50)."} {
		if !strings.Contains(doc, want) {
			t.Errorf("the report lacks %q", want)
		}
	}
	if strings.Count(doc, "| 50,000 | route | 100 | 100.0 s |") != 1 {
		t.Errorf("the churn table does not hold the 50k route run once:\n%s", doc)
	}
}

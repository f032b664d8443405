package bench

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// kube-proxy's result lines as kubeproxy-bench prints them (the JSON field names are the
// contract between the two modules), among console noise.
const kubeProxyFixture = `=== bench: kube-proxy n=5000
kubeproxy-bench n=5000: cold start: 300.00s
[  99.1] KIPVS-BENCH-KUBEPROXY {"n":5000,"kube_proxy_version":"v1.37.2","kernel":"6.1.0-test","cpus":2,"construct_seconds":0.25,` +
	`"found":{"VirtualServers":7001,"RealServers":70000,"Addresses":5000},` +
	`"cold_start":{"seconds":300,"writes":null,"sync_seconds":280},` +
	`"changes":{"endpoint-add":[{"seconds":14,"writes":null},{"seconds":13.2,"writes":null},{"seconds":13,"writes":null}],` +
	`"endpoint-remove":[{"seconds":12,"writes":null}],"kube-proxy-sync":[{"seconds":12.5,"writes":null}]},"peak_rss_bytes":524288000}` + "\r\n" +
	`KIPVS-BENCH-KUBEPROXY {"n":1000,"kube_proxy_version":"v1.37.2","cold_start":{"seconds":30},` +
	`"changes":{"endpoint-add":[{"seconds":2}],"endpoint-remove":[{"seconds":2}],"kube-proxy-sync":[{"seconds":2}]}}
KIPVS-BENCH-KUBEPROXY {"n":20000,"cold_start":{"seconds":900}}
`

// kube-proxy's lines are read from the same console log as kube-ipvs' results, in N order.
func TestReadRawReadsKubeProxy(t *testing.T) {
	dir := t.TempDir()
	ipvs, _ := json.Marshal(fakeResult(1000, 1))
	read := func(log string) (*Raw, error) {
		in := filepath.Join(dir, "console.log")
		if err := os.WriteFile(in, []byte(log), 0o644); err != nil {
			t.Fatal(err)
		}
		return ReadRaw(in)
	}
	raw, err := read(ResultPrefix + string(ipvs) + "\n" + kubeProxyFixture)
	if err != nil {
		t.Fatal(err)
	}
	kp := raw.KubeProxy
	if len(kp) != 3 || kp[0].N != 1000 || kp[1].N != 5000 || kp[2].N != 20000 {
		t.Fatalf("parsed %d results, want 1000, 5000, 20000 in order: %+v", len(kp), kp)
	}
	k := kp[1]
	if k.Version != "v1.37.2" || k.ColdStart.Seconds != 300 || k.ConstructSeconds != 0.25 || k.Found.VirtualServers != 7001 ||
		Summarize(k.Latencies(KindEndpointAdd)).Median != 13.2 || k.PeakRSSBytes != 500<<20 {
		t.Errorf("5000: %+v", k)
	}
	if raw, err := read(ResultPrefix + string(ipvs) + "\nnothing\n"); err != nil || len(raw.KubeProxy) != 0 || len(raw.KubeIPVS) != 1 {
		t.Errorf("a log without kube-proxy: %+v, %v", raw, err)
	}
	if _, err := read(ResultPrefix + string(ipvs) + "\n" + KubeProxyPrefix + "{broken\n"); err == nil {
		t.Error("a broken line parsed")
	}
	if _, err := read(kubeProxyFixture); err == nil {
		t.Error("a log without kube-ipvs results read")
	}
}

// The report compares at each N both ran (1k and 5k, not kube-proxy's lone 20k), with the
// ratios, and judges the two targets at 5k: 13.2 s against 50 ms is 264x (pass), 300 s
// against 30 s is 10x (miss).
func TestReportComparesWithKubeProxy(t *testing.T) {
	dir := t.TempDir()
	var log bytes.Buffer
	for _, r := range []*Result{fakeResult(1000, 1), fakeResult(5000, 5)} {
		b, _ := json.Marshal(r)
		log.WriteString(ResultPrefix + string(b) + "\n")
	}
	log.WriteString(kubeProxyFixture)
	in := filepath.Join(dir, "console.log")
	if err := os.WriteFile(in, log.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	md := filepath.Join(dir, "BENCHMARKS.md")
	if err := Report(in, md, filepath.Join(dir, "bench.png"), filepath.Join(dir, "bench.json")); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(md)
	doc := string(b)
	for _, want := range []string{
		"## Compared with kube-proxy's IPVS mode",
		"kube-proxy v1.37.2's own IPVS proxier",
		"| 5,000 | one endpoint added, median (min–max) | 13.2 s (13.0 s–14.0 s) | 50 ms (30 ms–70 ms) | 264x |",
		"| 5,000 | cold start (kube-proxy: building the proxier 250 ms before it) | 300.0 s | 30.0 s | 10.0x |",
		"| 1,000 | cold start (kube-proxy: building the proxier 0 ms before it) | 30.0 s | 6.00 s | 5.0x |",
		"| 5,000 | peak RSS (kube-ipvs' includes the fake clientset's store, 50 MiB) | 500 MiB | 500 MiB | |",
		"7,001 virtual servers and 70,000 real servers at 5k",
		"| one endpoint change at 5k at least 100x faster than kube-proxy's | 50 ms vs 13.2 s (median added): 264x | pass |",
		"| cold start at 5k at least 20x faster than kube-proxy's | 30.0 s vs 300.0 s: 10.0x | **miss** |",
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("the report lacks %q", want)
		}
	}
	if strings.Contains(doc, "| 20,000 |") || strings.Contains(doc, "kube-proxy was not run here") {
		t.Errorf("the report shows kube-proxy's lone 20k or the quoted table:\n%s", doc)
	}
}

// Without kube-proxy results the targets cannot pass.
func TestKubeProxyTargetsWithout5k(t *testing.T) {
	var b bytes.Buffer
	writeKubeProxy(&b, []*Result{fakeResult(1000, 1)}, []*KubeProxyResult{{N: 1000, ColdStart: Sample{Seconds: 30}}})
	if got := b.String(); !strings.Contains(got, "| cold start at 5k at least 20x faster than kube-proxy's | not measured at 5k | **miss** |") {
		t.Errorf("without 5k:\n%s", got)
	}
}

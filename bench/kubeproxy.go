package bench

import (
	"fmt"
	"io"
	"math"
	"strings"
)

// KubeProxyPrefix starts the line that carries one KubeProxyResult as JSON on the guest's
// console (printed by bench/kubeproxy/cmd/kubeproxy-bench, in a module of its own).
const KubeProxyPrefix = "KIPVS-BENCH-KUBEPROXY "

// KindKubeProxySync is kube-proxy's sync with nothing changed: Sync() with no pending
// change, which syncs both families in full (what its --sync-period timer does).
const KindKubeProxySync = "kube-proxy-sync"

// KubeProxyResult is kube-proxy's IPVS proxier measured at one N on the bench's synthetic
// cluster (the same objects kube-ipvs gets), in the same guest boot.
type KubeProxyResult struct {
	N           int    `json:"n"`
	Version     string `json:"kube_proxy_version"`
	Kernel      string `json:"kernel"`
	CPUs        int    `json:"cpus"`
	MemTotalMiB int    `json:"mem_total_mib"`
	GoVersion   string `json:"go_version"`
	// Expected is what kube-ipvs must build for these objects; Found what kube-proxy built.
	Expected Expected     `json:"expected"`
	Found    KernelCounts `json:"found"`
	// ConstructSeconds is NewDualStackProxier's time (start-up checks and cleanup), before
	// the cold start's clock starts, as kube-ipvs' controller.New is before its.
	ConstructSeconds float64 `json:"construct_seconds"`
	// ColdStart runs from starting the SyncLoop and feeding every object to the kernel
	// holding the last virtual server with all its real servers and the first sync of both
	// families ended; SyncSeconds is the first IPv4 sync's own duration.
	ColdStart Sample `json:"cold_start"`
	// Changes are KindEndpointAdd, KindEndpointRemove (until the kernel shows it) and
	// KindKubeProxySync (until both families' syncs ended); SyncSeconds is the IPv4 sync's.
	Changes      map[string][]Sample `json:"changes"`
	PeakRSSBytes uint64              `json:"peak_rss_bytes"`
	Errors       []string            `json:"errors,omitempty"`
}

// Latencies returns the latencies of a kind, in seconds.
func (k *KubeProxyResult) Latencies(kind string) []float64 {
	return sinceField(k.Changes[kind], func(s Sample) float64 { return s.Seconds })
}

func (k *KubeProxyResult) find(rs []*Result) *Result { return result(rs, k.N) }

// ratio is how many times longer kube-proxy took; NaN when either is unknown.
func ratio(kubeProxy, kubeIPVS float64) float64 {
	if kubeIPVS <= 0 || math.IsNaN(kubeIPVS) || math.IsNaN(kubeProxy) {
		return math.NaN()
	}
	return kubeProxy / kubeIPVS
}

func times(x float64) string {
	switch {
	case math.IsNaN(x):
		return "-"
	case x >= 100:
		return fmt.Sprintf("%.0fx", x)
	}
	return fmt.Sprintf("%.1fx", x)
}

// writeKubeProxy writes the "Compared with kube-proxy's IPVS mode" section from kube-proxy's
// results of the same run: at each N both ran, kube-proxy's and kube-ipvs' figures and how
// many times faster kube-ipvs was, then the two targets at 5k: one endpoint change at least
// 100x faster than kube-proxy's, a cold start at least 20x.
func writeKubeProxy(w io.Writer, rs []*Result, kp []*KubeProxyResult) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	var both []*KubeProxyResult
	for _, k := range kp {
		if k.find(rs) != nil {
			both = append(both, k)
		}
	}
	version := "v1.37"
	if len(kp) > 0 && kp[0].Version != "" {
		version = kp[0].Version
	}
	p("## Compared with kube-proxy's IPVS mode\n\n")
	p("kube-proxy %s's own IPVS proxier (`k8s.io/kubernetes/pkg/proxy/ipvs`, real IPVS, ipset and\n", version)
	p("iptables), run by `kubeproxy-bench` (module `bench/kubeproxy`) in the same guest boot, each N\n")
	p("in a fresh network namespace, on exactly the same Services and EndpointSlices. It is built\n")
	p("as kube-proxy's `server_linux.go` builds it (dual-stack, local traffic by cluster CIDR) with\n")
	p("`--min-sync-period=0` and no periodic sync during the measurements, and fed in-process\n")
	p("through the handlers its informers call (`OnServiceAdd`, `OnEndpointSliceAdd`,\n")
	p("`OnEndpointSliceUpdate`, the synced calls); the kernel is read through the bench's own\n")
	p("IPVS socket, and kube-proxy's `sync_proxy_rules_duration_seconds` tells when a sync ended.\n")
	p("kube-proxy's one change is a full sync of its family, its sync with nothing to change\n")
	p("(`Sync()`, what its `--sync-period` timer does) one of both families; kube-ipvs' no-op\n")
	p("sync recomputes one Service, its full resync repairs every one against a kernel dump.\n")
	p("Each kube-proxy sync reads every virtual server's real servers back and runs\n")
	p("iptables-restore; it adds each ipset entry it lacks with an `ipset add` process of its own\n")
	p("(`syncIPSetEntries` in `pkg/proxy/ipvs/ipset.go`), at cold start one per Service port and\n")
	p("address, and under emulation every process is expensive.\n\n")
	if len(both) == 0 {
		p("kube-proxy was not run at any N kube-ipvs was (`BENCH_KUBEPROXY_PLAN`).\n\n")
		return
	}
	p("| Services | measure | kube-proxy IPVS | kube-ipvs | kube-ipvs faster by |\n|---:|---|---:|---:|---:|\n")
	for _, k := range both {
		r := k.find(rs)
		n := commas(k.N)
		row := func(what string, kpx, kix float64, kps, kis string) {
			p("| %s | %s | %s | %s | %s |\n", n, what, kps, kis, times(ratio(kpx, kix)))
		}
		row("cold start (kube-proxy: building the proxier "+ms(k.ConstructSeconds)+" before it)",
			k.ColdStart.Seconds, r.ColdStart.Seconds, ms(k.ColdStart.Seconds), ms(r.ColdStart.Seconds))
		for _, kind := range []string{KindEndpointAdd, KindEndpointRemove} {
			a, b := k.Latencies(kind), r.Latencies(kind)
			row(kindNames[kind]+", median (min–max)", Summarize(a).Median, Summarize(b).Median, spread(a), spread(b))
		}
		a := k.Latencies(KindKubeProxySync)
		row("sync with nothing to change: kube-proxy `Sync()` vs kube-ipvs' no-op sync", Summarize(a).Median,
			Summarize(r.Latencies(KindNoop)).Median, spread(a), spread(r.Latencies(KindNoop)))
		row("the same vs kube-ipvs' full resync (every Service, kernel dump)", Summarize(a).Median,
			Summarize(r.Latencies(KindFullResync)).Median, spread(a), spread(r.Latencies(KindFullResync)))
		p("| %s | peak RSS (kube-ipvs' includes the fake clientset's store, %s) | %s | %s | |\n", n,
			mibs(r.HeapAPIBytes), mibs(k.PeakRSSBytes), mibs(r.PeakRSSBytes))
		if len(k.Errors) > 0 {
			p("| %s | kube-proxy run errors | **%s** | | |\n", n, strings.Join(k.Errors, "; "))
		}
	}
	p("\nAfter its cold start kube-proxy's kernel held ")
	var held []string
	for _, k := range both {
		held = append(held, fmt.Sprintf("%s virtual servers and %s real servers at %s (kube-ipvs %s and %s)",
			commas(k.Found.VirtualServers), commas(k.Found.RealServers), label(k.N),
			commas(k.find(rs).Found.VirtualServers), commas(k.find(rs).Found.RealServers)))
	}
	p("%s.\n\n", strings.Join(held, ", "))

	p("| target | measured | |\n|---|---|---|\n")
	k5 := kubeProxyAt(both, 5000)
	if k5 == nil {
		p("| one endpoint change at 5k at least 100x faster than kube-proxy's | not measured at 5k | **miss** |\n")
		p("| cold start at 5k at least 20x faster than kube-proxy's | not measured at 5k | **miss** |\n\n")
		return
	}
	r5 := k5.find(rs)
	kc, ic := Summarize(k5.Latencies(KindEndpointAdd)).Median, Summarize(r5.Latencies(KindEndpointAdd)).Median
	x := ratio(kc, ic)
	p("| one endpoint change at 5k at least 100x faster than kube-proxy's | %s vs %s (median added): %s | %s |\n",
		ms(ic), ms(kc), times(x), passFail(x >= 100))
	x = ratio(k5.ColdStart.Seconds, r5.ColdStart.Seconds)
	p("| cold start at 5k at least 20x faster than kube-proxy's | %s vs %s: %s | %s |\n\n",
		ms(r5.ColdStart.Seconds), ms(k5.ColdStart.Seconds), times(x), passFail(x >= 20))
}

func kubeProxyAt(kp []*KubeProxyResult, n int) *KubeProxyResult {
	for _, k := range kp {
		if k.N == n {
			return k
		}
	}
	return nil
}

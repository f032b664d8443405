// Command kubeproxy-bench measures kube-proxy v1.37's own IPVS proxier (k8s.io/kubernetes
// pkg/proxy/ipvs, real ipset, iptables and IPVS) on the scale bench's synthetic cluster, so
// that BENCHMARKS.md compares kube-ipvs with it from the same guest boot.
//
//	kubeproxy-bench -n N [-reps R]   as root, in a fresh network namespace of the guest:
//	                                 prints one line, bench.KubeProxyPrefix + JSON
//
// It builds the proxier as kube-proxy's server_linux.go does (dual-stack, cluster-CIDR local
// detection; like test/apiserver/cmd/kube-proxy-ipvs) but with --min-sync-period=0, so that
// each change is applied alone, and a day's --sync-period, so that no periodic sync falls
// into a measurement. It drives the proxier in-process through the handlers kube-proxy's
// informers call, with exactly the objects package bench feeds kube-ipvs, and judges it by
// the kernel, read through a netlink socket of its own (bench.Probe).
//
// It lives in its own module (bench/kubeproxy) so that the product's go.mod never takes on
// k8s.io/kubernetes; hack/bench.sh builds it.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/kube-ipvs/kube-ipvs/bench"
)

// Version is the kube-proxy the module pins (go.mod's k8s.io/kubernetes).
const Version = "v1.37.2"

func main() {
	n := flag.Int("n", 1000, "number of Services")
	reps := flag.Int("reps", 5, "repetitions of each single change")
	timeout := flag.Duration("timeout", 30*time.Minute, "longest wait for any one kernel state")
	klog.InitFlags(nil)
	// kube-proxy logs its syncs at verbosity 2 and more; the bench keeps level 0 (warnings,
	// errors and the few start-up lines).
	_ = flag.Set("v", "0")
	flag.Parse()
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer cancel()

	kernel, mem := bench.Host()
	res := &bench.KubeProxyResult{N: *n, Version: Version, Kernel: kernel, CPUs: runtime.NumCPU(), MemTotalMiB: mem,
		GoVersion: runtime.Version(), Expected: bench.Expect(*n), Changes: map[string][]bench.Sample{}}
	r := &run{ctx: ctx, n: *n, reps: *reps, timeout: *timeout, res: res}
	err := r.all()
	res.PeakRSSBytes = bench.PeakRSS()
	if err != nil {
		res.Errors = append(res.Errors, err.Error())
	}
	b, jerr := json.Marshal(res)
	if jerr != nil {
		fmt.Fprintf(os.Stderr, "kubeproxy-bench: %v\n", jerr)
		os.Exit(1)
	}
	fmt.Printf("%s%s\n", bench.KubeProxyPrefix, b)
	if len(res.Errors) > 0 {
		fmt.Fprintf(os.Stderr, "kubeproxy-bench: n=%d: %v\n", *n, res.Errors)
		os.Exit(1)
	}
}

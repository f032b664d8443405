// Command kipvs-bench is kube-ipvs' scale bench (package bench).
//
//	kipvs-bench run -n N [-reps R] [-full-reps F] [-binding address|route] [-churn-rate 5]
//	                                                 in the guest, in a fresh network namespace:
//	                                                 prints one result line (ResultPrefix + JSON)
//	kipvs-bench report -in FILE [-md BENCHMARKS.md] [-png docs/bench.png] [-json docs/bench-results.json]
//	                                                 on the host: the report and chart from result lines
//
// `make bench` (hack/bench.sh) runs both.
package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/kube-ipvs/kube-ipvs/bench"
	"github.com/kube-ipvs/kube-ipvs/config"
	"github.com/kube-ipvs/kube-ipvs/dummyif"
	"github.com/kube-ipvs/kube-ipvs/sysctl"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	switch os.Args[1] {
	case "run":
		os.Exit(run(os.Args[2:]))
	case "report":
		os.Exit(report(os.Args[2:]))
	default:
		usage()
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: kipvs-bench run -n N [-reps R] [-full-reps F] | kipvs-bench report -in FILE [-md FILE] [-png FILE] [-json FILE]")
	os.Exit(2)
}

func run(args []string) int {
	fs := flag.NewFlagSet("run", flag.ExitOnError)
	n := fs.Int("n", 1000, "number of Services")
	reps := fs.Int("reps", 7, "repetitions of each single change")
	fullReps := fs.Int("full-reps", 3, "repetitions of the full resync")
	minSync := fs.Duration("min-sync-period", 0, "the controller's --min-sync-period")
	timeout := fs.Duration("timeout", 20*time.Minute, "longest wait for any one kernel state")
	profile := fs.Bool("cpuprofile", false, "print a CPU profile of the run (base64, after "+bench.ProfilePrefix+")")
	resyncProfile := fs.Bool("resyncprofile", false, "print a CPU profile of the full resyncs alone (base64, after "+bench.ProfilePrefix+")")
	binding := fs.String("binding", string(dummyif.BindAddress), "--vip-binding: address or route")
	rateEst := fs.String("rate-estimation", string(sysctl.RateEstimationKernel), "--ipvs-rate-estimation: kernel, on or off")
	repairStep := fs.Int("repair-step", config.DefaultRepairStep, "--repair-step (0: repairs in one go)")
	churnRate := fs.Float64("churn-rate", 5, "endpoint changes per second after the restart (0: no churn)")
	churnCycles := fs.Int("churn-cycles", 2, "repair cycles the churn runs through")
	churnMax := fs.Duration("churn-max", 30*time.Minute, "longest churn, whatever the cycles")
	slowTrace := fs.Duration("slowtrace", 0, "print execution traces of churn changes slower than this (base64, after "+bench.TracePrefix+"; 0: none)")
	churnAllocs := fs.Bool("churnallocs", false, "print heap profiles taken as the churn begins and ends (base64, after "+bench.HeapProfilePrefix+"; their alloc_space difference is the churn's)")
	gate := fs.Bool("foreground-gate", true, "run the proxy with its foreground gate (false: background listings never park)")
	heap := fs.Bool("heapprofile", false, "print a heap profile taken after the cold start (base64, after "+bench.HeapProfilePrefix+")")
	_ = fs.Parse(args)
	if *profile {
		var buf bytes.Buffer
		if err := pprof.StartCPUProfile(&buf); err == nil {
			defer func() {
				pprof.StopCPUProfile()
				fmt.Printf("%s%s\n", bench.ProfilePrefix, base64.StdEncoding.EncodeToString(buf.Bytes()))
			}()
		}
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer cancel()
	b, err := dummyif.ParseBinding(*binding)
	if err != nil {
		fmt.Fprintf(os.Stderr, "kipvs-bench: -binding: %v\n", err)
		return 2
	}
	re, err := sysctl.ParseRateEstimation(*rateEst)
	if err != nil {
		fmt.Fprintf(os.Stderr, "kipvs-bench: -rate-estimation: %v\n", err)
		return 2
	}
	opts := bench.Options{RateEstimation: re, N: *n, Reps: *reps, FullReps: *fullReps, MinSyncPeriod: *minSync, Progress: os.Stderr, Timeout: *timeout,
		Binding: b, RepairStep: *repairStep, NoForegroundGate: !*gate, Churn: bench.ChurnOptions{Rate: *churnRate, Cycles: *churnCycles, Max: *churnMax}}
	if *slowTrace > 0 {
		opts.SlowTrace = bench.SlowTrace{Threshold: *slowTrace, Max: 3, Out: func(at float64, took time.Duration, tr []byte) {
			fmt.Printf("%s%.3f %.1f %s\n", bench.TracePrefix, at, float64(took)/float64(time.Millisecond), base64.StdEncoding.EncodeToString(tr))
		}}
	}
	var churnBufs [2]bytes.Buffer
	if *churnAllocs {
		opts.ChurnHeapProfiles = [2]io.Writer{&churnBufs[0], &churnBufs[1]}
		defer func() {
			for i := range churnBufs {
				fmt.Printf("%s%s\n", bench.HeapProfilePrefix, base64.StdEncoding.EncodeToString(churnBufs[i].Bytes()))
			}
		}()
	}
	var heapBuf bytes.Buffer
	if *heap {
		opts.HeapProfile = &heapBuf
		defer func() {
			fmt.Printf("%s%s\n", bench.HeapProfilePrefix, base64.StdEncoding.EncodeToString(heapBuf.Bytes()))
		}()
	}
	var resyncBuf bytes.Buffer
	if *resyncProfile && !*profile {
		opts.ResyncProfile = &resyncBuf
		defer func() {
			fmt.Printf("%s%s\n", bench.ProfilePrefix, base64.StdEncoding.EncodeToString(resyncBuf.Bytes()))
		}()
	}
	res, err := bench.Run(ctx, opts)
	if res != nil {
		if err != nil {
			res.Errors = append(res.Errors, err.Error())
		}
		b, jerr := json.Marshal(res)
		if jerr != nil {
			fmt.Fprintf(os.Stderr, "kipvs-bench: %v\n", jerr)
			return 1
		}
		fmt.Printf("%s%s\n", bench.ResultPrefix, b)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "kipvs-bench: n=%d: %v\n", *n, err)
		return 1
	}
	if len(res.Errors) > 0 {
		return 1
	}
	return 0
}

func report(args []string) int {
	fs := flag.NewFlagSet("report", flag.ExitOnError)
	in := fs.String("in", "", "file with result lines (the guest's console log will do)")
	md := fs.String("md", "BENCHMARKS.md", "markdown report to write")
	png := fs.String("png", "docs/bench.png", "chart to write")
	js := fs.String("json", "docs/bench-results.json", "results to write as JSON")
	_ = fs.Parse(args)
	if *in == "" {
		usage()
	}
	if err := bench.Report(*in, *md, *png, *js); err != nil {
		fmt.Fprintf(os.Stderr, "kipvs-bench report: %v\n", err)
		return 1
	}
	return 0
}

package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kube-ipvs/kube-ipvs/config"
	"github.com/kube-ipvs/kube-ipvs/manifests"
	"github.com/kube-ipvs/kube-ipvs/preflight"
	"github.com/kube-ipvs/kube-ipvs/proxy"
	"github.com/kube-ipvs/kube-ipvs/sysctl"
)

// preflightOptions are the flags of `kube-ipvs preflight`.
type preflightOptions struct {
	scheduler  string
	noModprobe bool
	kubeconfig string
	manifests  string
	output     string
	strictARP  bool
	rateEst    string
	timeout    time.Duration
}

func preflightFlags(o *preflightOptions) *pflag.FlagSet {
	fs := pflag.NewFlagSet("preflight", pflag.ContinueOnError)
	fs.SortFlags = false
	fs.StringVar(&o.scheduler, "scheduler", "rr", "the default IPVS scheduler, as given to run: "+strings.Join(proxy.Schedulers(), ", "))
	fs.BoolVar(&o.noModprobe, "no-modprobe", false, "load no kernel module: report missing ones and skip the probes that would make the kernel load them")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "list the Services through this kubeconfig and also check every scheduler named by their "+proxy.AnnotationScheduler+" annotation")
	fs.StringVar(&o.manifests, "manifests", "", "as --kubeconfig, but read the Services from this YAML/JSON file or folder (as run --manifests; wins over --kubeconfig)")
	fs.StringVarP(&o.output, "output", "o", "table", "output format: table or json")
	fs.BoolVar(&o.strictARP, "strict-arp", false, "also check the sysctls run --strict-arp sets")
	fs.StringVar(&o.rateEst, "ipvs-rate-estimation", string(sysctl.RateEstimationKernel), "also check net.ipv4.vs.run_estimation, which run --ipvs-rate-estimation=on or off sets")
	fs.DurationVar(&o.timeout, "timeout", 2*time.Minute, "give up after this long (listing Services, loading modules, probes)")
	documentZeroDefaults(fs)
	return fs
}

// runPreflight is `kube-ipvs preflight`: exit 0 when IPVS mode can run, 1 when it cannot,
// 2 on usage or internal errors.
func runPreflight(args []string, stdout, stderr io.Writer) int {
	return preflightMain(args, stdout, stderr, nil)
}

// preflightMain is runPreflight with injectable kernel dependencies (nil: the host's).
func preflightMain(args []string, stdout, stderr io.Writer, deps *preflight.Deps) int {
	var o preflightOptions
	fs := preflightFlags(&o)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stdout, "Usage: kube-ipvs preflight [flags]\n\n"+
			"Checks whether this node can run kube-ipvs in IPVS mode: kernel modules (loaded with\n"+
			"modprobe when missing), the IPVS and ipset netlink interfaces, a probe virtual server on\n"+
			"%s per scheduler, a dummy link, iptables and the sysctls. Prints one row per\n"+
			"check with the fix to apply. Exit status: 0 IPVS mode can run, 1 it cannot, 2 usage or\n"+
			"internal error. Suitable for an init container.\n\nFlags:\n%s",
			preflight.ProbeVSAddress, fs.FlagUsages())
	}
	if code, ok := parseArgs(fs, args, stderr); !ok {
		return code
	}
	if err := config.CheckScheduler(o.scheduler); err != nil {
		fmt.Fprintf(stderr, "kube-ipvs preflight: --scheduler=%q: %v\n", o.scheduler, err)
		return 2
	}
	if o.output != "table" && o.output != "json" {
		fmt.Fprintf(stderr, "kube-ipvs preflight: -o %q: use table or json\n", o.output)
		return 2
	}
	rateEst, err := sysctl.ParseRateEstimation(o.rateEst)
	if err != nil {
		fmt.Fprintf(stderr, "kube-ipvs preflight: --ipvs-rate-estimation=%q: %v\n", o.rateEst, err)
		return 2
	}
	if o.timeout <= 0 {
		fmt.Fprintf(stderr, "kube-ipvs preflight: --timeout=%s: must be positive\n", o.timeout)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()

	scan, err := scanServices(ctx, o)
	if err != nil {
		fmt.Fprintf(stderr, "kube-ipvs preflight: %v\n", err)
		return 2
	}
	rep := preflight.Run(ctx, preflight.Options{
		DefaultScheduler: o.scheduler,
		Services:         scan,
		NoModprobe:       o.noModprobe,
		StrictARP:        o.strictARP,
		RateEstimation:   rateEst,
		Deps:             deps,
	})
	if o.output == "json" {
		err = rep.WriteJSON(stdout)
	} else {
		err = rep.WriteTable(stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "kube-ipvs preflight: writing the report: %v\n", err)
		return 2
	}
	return rep.ExitCode()
}

// scanServices lists the Services once, from --manifests or --kubeconfig; nil when neither
// is given. A source that cannot be read at all (a missing manifest path, a broken
// kubeconfig) is a usage error; an API server that does not answer becomes a failed row.
func scanServices(ctx context.Context, o preflightOptions) (*preflight.ServiceScan, error) {
	switch {
	case o.manifests != "":
		objs, err := manifests.Load(o.manifests)
		if objs == nil && err != nil {
			return nil, fmt.Errorf("--manifests %s: %w", o.manifests, err)
		}
		var svcs []corev1.Service
		for _, obj := range objs {
			if s, ok := obj.(*corev1.Service); ok {
				svcs = append(svcs, *s)
			}
		}
		scan := serviceScan("--manifests "+o.manifests, svcs)
		scan.Partial = err // the valid documents still count; the broken ones are named
		return scan, nil
	case o.kubeconfig != "":
		rc, err := clientcmd.BuildConfigFromFlags("", o.kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("--kubeconfig %s: %w", o.kubeconfig, err)
		}
		rc.UserAgent = "kube-ipvs-preflight/" + version
		rc.Timeout = 30 * time.Second
		cs, err := kubernetes.NewForConfig(rc)
		if err != nil {
			return nil, fmt.Errorf("--kubeconfig %s: %w", o.kubeconfig, err)
		}
		source := "--kubeconfig " + o.kubeconfig
		list, err := cs.CoreV1().Services(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
		if err != nil {
			return &preflight.ServiceScan{Source: source, Err: err}, nil
		}
		return serviceScan(source, list.Items), nil
	}
	return nil, nil
}

// serviceScan reads the Services with the proxy's own rules (which it handles, which
// schedulers they name) into the plain values the preflight checks.
func serviceScan(source string, svcs []corev1.Service) *preflight.ServiceScan {
	s := proxy.ScanServices(svcs)
	return &preflight.ServiceScan{Source: source, Services: s.Handled, Schedulers: s.Schedulers, Invalid: s.Invalid}
}

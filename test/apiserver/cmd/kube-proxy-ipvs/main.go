// Command kube-proxy-ipvs is kube-proxy v1.37's own IPVS proxier (k8s.io/kubernetes
// pkg/proxy/ipvs, real ipset, iptables and IPVS), or with --mode iptables its iptables
// proxier (pkg/proxy/iptables), fed Services, EndpointSlices and Nodes from manifest files
// instead of an API server, for the parity and migration tests (make parity, make
// migration). It builds the proxier with the same arguments as kube-proxy's server_linux.go
// (dual-stack, cluster-CIDR local detection). With --once it exits after the first full sync
// of every family, leaving the rules in place to be read; without it, it prints "synced" on
// stderr after that sync and keeps syncing until it is signalled, then exits without
// cleaning up, as a kube-proxy Pod ends in a DaemonSet rollout.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/component-base/metrics/testutil"
	utilsysctl "k8s.io/component-helpers/node/util/sysctl"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/proxy"
	proxyapis "k8s.io/kubernetes/pkg/proxy/apis"
	kubeproxyconfig "k8s.io/kubernetes/pkg/proxy/apis/config"
	"k8s.io/kubernetes/pkg/proxy/iptables"
	"k8s.io/kubernetes/pkg/proxy/ipvs"
	utilipset "k8s.io/kubernetes/pkg/proxy/ipvs/ipset"
	utilipvs "k8s.io/kubernetes/pkg/proxy/ipvs/util"
	proxymetrics "k8s.io/kubernetes/pkg/proxy/metrics"
	proxyutil "k8s.io/kubernetes/pkg/proxy/util"
	utiliptables "k8s.io/kubernetes/pkg/util/iptables"
	"k8s.io/utils/ptr"
)

type options struct {
	manifests, hostname   string
	mode                  kubeproxyconfig.ProxyMode
	nodeIPs, clusterCIDRs []string
	once                  bool
	timeout               time.Duration
}

func main() {
	var o options
	var nodeIPs, clusterCIDRs, mode string
	flag.StringVar(&o.manifests, "manifests", "", "file or folder of Service, EndpointSlice and Node manifests")
	flag.StringVar(&o.hostname, "hostname-override", "", "this node's name")
	flag.StringVar(&nodeIPs, "node-ip", "", "the node's IPs, one per family, comma-separated")
	flag.StringVar(&clusterCIDRs, "cluster-cidr", "", "the pod networks, comma-separated (kube-proxy's --cluster-cidr)")
	flag.StringVar(&mode, "mode", "ipvs", "the proxier: ipvs or iptables")
	flag.BoolVar(&o.once, "once", false, "exit 0 after the first full sync of both families")
	flag.DurationVar(&o.timeout, "timeout", 2*time.Minute, "with --once: give up after this long")
	klog.InitFlags(nil)
	flag.Parse()
	o.nodeIPs, o.clusterCIDRs = splitList(nodeIPs), splitList(clusterCIDRs)
	o.mode = kubeproxyconfig.ProxyMode(mode)
	if o.mode != kubeproxyconfig.ProxyModeIPVS && o.mode != kubeproxyconfig.ProxyModeIPTables {
		fmt.Fprintf(os.Stderr, "kube-proxy-ipvs: --mode %q: want ipvs or iptables\n", mode)
		os.Exit(2)
	}
	if err := run(context.Background(), o); err != nil {
		fmt.Fprintln(os.Stderr, "kube-proxy-ipvs:", err)
		os.Exit(1)
	}
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func run(ctx context.Context, o options) error {
	objs, err := loadManifests(o.manifests)
	if err != nil {
		return err
	}
	proxymetrics.RegisterMetrics(o.mode)
	proxier, err := newProxier(ctx, o)
	if err != nil {
		return err
	}
	feed(proxier, objs, o.hostname)
	start := time.Now()
	go proxier.SyncLoop()
	proxier.Sync()
	if err := waitSynced(start, o.timeout); err != nil || o.once {
		return err
	}
	// A test waits for this line; SIGTERM then ends the process with Go's default action,
	// leaving every rule in place.
	fmt.Fprintln(os.Stderr, "synced")
	select {}
}

// config is kube-proxy's defaulted configuration (v1alpha1 defaults) for the mode with the
// cluster CIDRs as local-traffic detection: what the parity manifests' cluster runs.
func config(o options) *kubeproxyconfig.KubeProxyConfiguration {
	return &kubeproxyconfig.KubeProxyConfiguration{
		Mode:             o.mode,
		HostnameOverride: o.hostname,
		SyncPeriod:       metav1.Duration{Duration: 30 * time.Second},
		MinSyncPeriod:    metav1.Duration{Duration: time.Second},
		IPTables: kubeproxyconfig.KubeProxyIPTablesConfiguration{MasqueradeBit: ptr.To[int32](14),
			LocalhostNodePorts: ptr.To(true)},
		IPVS:            kubeproxyconfig.KubeProxyIPVSConfiguration{Scheduler: "rr"},
		DetectLocalMode: kubeproxyconfig.LocalModeClusterCIDR,
		DetectLocal:     kubeproxyconfig.DetectLocalConfiguration{ClusterCIDRs: o.clusterCIDRs},
	}
}

func newProxier(ctx context.Context, o options) (proxy.Provider, error) {
	cfg := config(o)
	nodeIPs, err := parseNodeIPs(o.nodeIPs)
	if err != nil {
		return nil, err
	}
	detectors := map[v1.IPFamily]proxyutil.LocalTrafficDetector{
		v1.IPv4Protocol: proxyutil.NewNoOpLocalDetector(),
		v1.IPv6Protocol: proxyutil.NewNoOpLocalDetector(),
	}
	for fam, cidrs := range proxyutil.MapCIDRsByIPFamily(o.clusterCIDRs) {
		detectors[fam] = proxyutil.NewDetectLocalByCIDR(cidrs[0].String())
	}
	if o.mode == kubeproxyconfig.ProxyModeIPTables {
		return iptables.NewDualStackProxier(ctx, cfg, utiliptables.NewBestEffort(), utilsysctl.New(), detectors,
			o.hostname, nodeIPs, &events.FakeRecorder{}, nil, false)
	}
	ipsetInterface, ipvsInterface := utilipset.New(), utilipvs.New()
	if err := ipvs.CanUseIPVSProxier(ctx, ipvsInterface, ipsetInterface, cfg.IPVS.Scheduler); err != nil {
		return nil, fmt.Errorf("can't use the IPVS proxier: %w", err)
	}
	return ipvs.NewDualStackProxier(ctx, cfg, utiliptables.NewBestEffort(), ipvsInterface, ipsetInterface,
		utilsysctl.New(), detectors, o.hostname, nodeIPs, &events.FakeRecorder{}, nil, false)
}

// parseNodeIPs maps --node-ip's addresses by family.
func parseNodeIPs(list []string) (map[v1.IPFamily]net.IP, error) {
	nodeIPs := map[v1.IPFamily]net.IP{}
	for _, s := range list {
		ip := net.ParseIP(s)
		if ip == nil {
			return nil, fmt.Errorf("--node-ip: %q is not an IP", s)
		}
		nodeIPs[family(ip)] = ip
	}
	return nodeIPs, nil
}

func family(ip net.IP) v1.IPFamily {
	if ip.To4() != nil {
		return v1.IPv4Protocol
	}
	return v1.IPv6Protocol
}

// feed hands the objects to the proxier as kube-proxy's informers would on start: every
// object its label selector lets through added, then the synced calls; the node's labels go
// through OnTopologyChange as kube-proxy's NodeTopologyConfig does.
func feed(p proxy.Provider, objs objects, hostname string) {
	for _, n := range objs.nodes {
		if n.Name == hostname {
			p.OnTopologyChange(n.Labels)
		}
	}
	for _, s := range objs.services {
		if watched(s.Labels) {
			p.OnServiceAdd(s)
		}
	}
	for _, s := range objs.slices {
		if watched(s.Labels) {
			p.OnEndpointSliceAdd(s)
		}
	}
	p.OnServiceSynced()
	p.OnEndpointSlicesSynced()
}

// watched is kube-proxy's informer selectors (cmd/kube-proxy/app/server.go): no
// service.kubernetes.io/service-proxy-name label, and for EndpointSlices no
// service.kubernetes.io/headless either (a Service never carries that one).
func watched(labels map[string]string) bool {
	_, otherProxy := labels[proxyapis.LabelServiceProxyName]
	_, headless := labels[v1.IsHeadlessService]
	return !otherProxy && !headless
}

// waitSynced polls kube-proxy's own "last successful sync" gauge of both families until each
// is later than start: the proxier has then written the whole table at least once.
func waitSynced(start time.Time, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		done := true
		for _, fam := range []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} {
			ts, err := testutil.GetGaugeMetricValue(proxymetrics.SyncProxyRulesLastTimestamp.WithLabelValues(string(fam)))
			if err != nil || ts < float64(start.Unix()) {
				done = false
			}
		}
		if done {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no full sync of both families within %v", timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

package main

import (
	"context"
	"fmt"
	"net"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	utilsysctl "k8s.io/component-helpers/node/util/sysctl"
	"k8s.io/kubernetes/pkg/proxy"
	kubeproxyconfig "k8s.io/kubernetes/pkg/proxy/apis/config"
	"k8s.io/kubernetes/pkg/proxy/ipvs"
	utilipset "k8s.io/kubernetes/pkg/proxy/ipvs/ipset"
	utilipvs "k8s.io/kubernetes/pkg/proxy/ipvs/util"
	proxyutil "k8s.io/kubernetes/pkg/proxy/util"
	utiliptables "k8s.io/kubernetes/pkg/util/iptables"
	"k8s.io/utils/ptr"

	"github.com/kube-ipvs/kube-ipvs/bench"
)

// config is kube-proxy's defaulted IPVS configuration (v1alpha1 defaults, as
// test/apiserver/cmd/kube-proxy-ipvs has it) with the bench's timing: --min-sync-period=0,
// as kube-ipvs' bench runs, and a --sync-period no measurement lasts.
func config() *kubeproxyconfig.KubeProxyConfiguration {
	return &kubeproxyconfig.KubeProxyConfiguration{
		Mode:             kubeproxyconfig.ProxyModeIPVS,
		HostnameOverride: bench.NodeName,
		SyncPeriod:       metav1.Duration{Duration: 24 * time.Hour},
		MinSyncPeriod:    metav1.Duration{Duration: 0},
		IPTables: kubeproxyconfig.KubeProxyIPTablesConfiguration{MasqueradeBit: ptr.To[int32](14),
			LocalhostNodePorts: ptr.To(true)},
		IPVS:            kubeproxyconfig.KubeProxyIPVSConfiguration{Scheduler: "rr"},
		DetectLocalMode: kubeproxyconfig.LocalModeClusterCIDR,
		DetectLocal:     kubeproxyconfig.DetectLocalConfiguration{ClusterCIDRs: []string{bench.ClusterCIDR.String()}},
	}
}

// newProxier builds the dual-stack IPVS proxier as server_linux.go does on a node whose
// kernel has both families (kube-proxy then always runs both): the IPVS and ipset checks
// first, then NewDualStackProxier with cluster-CIDR local detection for IPv4 and none for
// IPv6 (no IPv6 cluster CIDR), and node IPs as detectNodeIPs gives them (the bench's node IP,
// the loopback for the family it lacks).
func newProxier(ctx context.Context) (proxy.Provider, error) {
	cfg := config()
	detectors := map[v1.IPFamily]proxyutil.LocalTrafficDetector{
		v1.IPv4Protocol: proxyutil.NewDetectLocalByCIDR(bench.ClusterCIDR.String()),
		v1.IPv6Protocol: proxyutil.NewNoOpLocalDetector(),
	}
	nodeIPs := map[v1.IPFamily]net.IP{
		v1.IPv4Protocol: net.IP(bench.NodeIP.AsSlice()),
		v1.IPv6Protocol: net.IPv6loopback,
	}
	ipsetInterface, ipvsInterface := utilipset.New(), utilipvs.New()
	if err := ipvs.CanUseIPVSProxier(ctx, ipvsInterface, ipsetInterface, cfg.IPVS.Scheduler); err != nil {
		return nil, fmt.Errorf("can't use the IPVS proxier: %w", err)
	}
	return ipvs.NewDualStackProxier(ctx, cfg, utiliptables.NewBestEffort(), ipvsInterface, ipsetInterface,
		utilsysctl.New(), detectors, bench.NodeName, nodeIPs, &events.FakeRecorder{}, nil, false)
}

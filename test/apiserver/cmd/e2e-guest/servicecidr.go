package main

import (
	"os/exec"
	"regexp"
	"strings"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// scenarioServiceCIDR: kube-ipvs watches the API server's ServiceCIDR objects (the default
// "kubernetes" one comes from --service-cluster-ip-range), so the ClusterIP the deleted
// Service left is refused at once instead of following the node's route for it (a dummy
// link here, which swallows it); a ServiceCIDR created later applies without a restart.
// Run after scenarioDelete.
func (g *guest) scenarioServiceCIDR() {
	g.waitProxyLog(`Service CIDRs.*cidrs="?\[10\.96\.0\.0/16\]"? from="ServiceCIDR objects"`)
	sh(ipBin, "link", "add", "leak0", "type", "dummy")
	defer exec.Command(ipBin, "link", "del", "leak0").Run()
	sh(ipBin, "link", "set", "leak0", "up")
	sh(ipBin, "route", "add", "10.96.0.0/16", "dev", "leak0")
	start := time.Now()
	out, err := exec.Command(ipBin, "netns", "exec", clientPod, "kipvs-echo", "ask", "--timeout", "5s", g.vip+":80").CombinedOutput()
	// The request's own limit is 5 s; a refusal comes back in one round trip (the rest is
	// starting the client under emulation).
	if took := time.Since(start); err == nil || !strings.Contains(string(out), "connection refused") || took > 4*time.Second {
		fatalf("the unallocated ClusterIP %s:80 after %s: %v %s; want connection refused at once", g.vip, took, err, out)
	}
	pass("service CIDR: the ClusterIP %s the deleted Service left is refused at once (ServiceCIDR kubernetes watched)", g.vip)

	extra := &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: "e2e-extra"},
		Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{"10.97.0.0/24"}}}
	if _, err := g.cs.NetworkingV1().ServiceCIDRs().Create(g.ctx, extra, metav1.CreateOptions{}); err != nil {
		fatalf("create ServiceCIDR e2e-extra: %v", err)
	}
	g.waitProxyLog(`Service CIDRs.*cidrs="?\[10\.96\.0\.0/16 10\.97\.0\.0/24\]"? from="ServiceCIDR objects"`)
	pass("service CIDR: a ServiceCIDR created through the API applied without a restart")
	if err := g.cs.NetworkingV1().ServiceCIDRs().Delete(g.ctx, extra.Name, metav1.DeleteOptions{}); err != nil {
		fatalf("delete ServiceCIDR e2e-extra: %v", err)
	}
}

// waitProxyLog waits until kube-ipvs's log matches re.
func (g *guest) waitProxyLog(re string) {
	rx := regexp.MustCompile(re)
	eventually(30*time.Second, "kube-ipvs to log "+re, func() bool { return rx.MatchString(g.proxyLog.String()) })
}

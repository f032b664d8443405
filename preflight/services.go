package preflight

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/kube-ipvs/kube-ipvs/proxy"
)

// ScanServices collects the schedulers Services ask for with the kube-ipvs.io/scheduler
// annotation. Services the proxy leaves alone (another proxy's, ExternalName, headless)
// are not counted. source says where they came from, for the report.
func ScanServices(source string, svcs []corev1.Service) *ServiceScan {
	s := &ServiceScan{Source: source, Schedulers: map[string][]string{}}
	for i := range svcs {
		svc := &svcs[i]
		if handledElsewhere(svc) {
			continue
		}
		s.Services++
		raw, ok := svc.Annotations[proxy.AnnotationScheduler]
		name := strings.ToLower(strings.TrimSpace(raw))
		if !ok || name == "" {
			continue
		}
		id := svc.Namespace + "/" + svc.Name
		if !slices.Contains(proxy.Schedulers(), name) {
			s.Invalid = append(s.Invalid, fmt.Sprintf("%s: %q", id, raw))
			continue
		}
		s.Schedulers[name] = append(s.Schedulers[name], id)
	}
	for _, v := range s.Schedulers {
		sort.Strings(v)
	}
	sort.Strings(s.Invalid)
	return s
}

// handledElsewhere mirrors the proxy's rule: Services labelled with a service-proxy-name
// belong to another proxy, ExternalName Services are DNS only, headless ones have no VIP.
func handledElsewhere(svc *corev1.Service) bool {
	if _, other := svc.Labels[proxy.LabelServiceProxyName]; other {
		return true
	}
	if svc.Spec.Type == corev1.ServiceTypeExternalName {
		return true
	}
	return svc.Spec.ClusterIP == corev1.ClusterIPNone ||
		(len(svc.Spec.ClusterIPs) > 0 && svc.Spec.ClusterIPs[0] == corev1.ClusterIPNone)
}

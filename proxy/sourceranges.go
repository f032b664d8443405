package proxy

import (
	"net/netip"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/kube-ipvs/kube-ipvs/model"
)

// AnnotationSourceRanges is the older way to give load-balancer source ranges; as in
// kube-proxy, it counts only when spec.loadBalancerSourceRanges is empty.
const AnnotationSourceRanges = "service.beta.kubernetes.io/load-balancer-source-ranges"

// SourceRangesOf reads a Service's spec.loadBalancerSourceRanges, or the annotation when
// the field is empty. Ranges that do not parse are skipped.
func SourceRangesOf(svc *v1.Service) model.SourceRanges {
	list := svc.Spec.LoadBalancerSourceRanges
	if len(list) == 0 {
		if ann := strings.TrimSpace(svc.Annotations[AnnotationSourceRanges]); ann != "" {
			list = strings.Split(ann, ",")
		}
	}
	var r model.SourceRanges
	seen := map[netip.Prefix]bool{}
	for _, s := range list {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		r.Set = true
		p, err := netip.ParsePrefix(s)
		if err != nil {
			continue
		}
		if p.Addr().Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		p = p.Masked()
		if seen[p] {
			continue
		}
		seen[p] = true
		f := b2i(p.Addr().Is6())
		if p.Bits() == 0 {
			r.All[f] = true
			continue
		}
		r.ByFamily[f] = append(r.ByFamily[f], p)
	}
	return r
}

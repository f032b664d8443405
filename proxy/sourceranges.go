package proxy

import (
	"net/netip"
	"strings"

	v1 "k8s.io/api/core/v1"
)

// AnnotationSourceRanges is the older way to give load-balancer source ranges; as in
// kube-proxy, it counts only when spec.loadBalancerSourceRanges is empty.
const AnnotationSourceRanges = "service.beta.kubernetes.io/load-balancer-source-ranges"

// SourceRanges are a Service's load-balancer source ranges by family, as the IPVS mode's
// ipsets and the iptables mode's rules both read them.
type SourceRanges struct {
	// Set says the Service has source ranges at all, even if none of them parses: it is then
	// filtered (and admits no one but what is always allowed), never left open.
	Set      bool
	byFamily [2][]netip.Prefix // masked, without duplicates; IPv4-mapped ranges as IPv4
	all      [2]bool           // a range covers the whole family
}

// SourceRangesOf reads a Service's spec.loadBalancerSourceRanges, or the annotation when
// the field is empty. Ranges that do not parse are skipped.
func SourceRangesOf(svc *v1.Service) SourceRanges {
	list := svc.Spec.LoadBalancerSourceRanges
	if len(list) == 0 {
		if ann := strings.TrimSpace(svc.Annotations[AnnotationSourceRanges]); ann != "" {
			list = strings.Split(ann, ",")
		}
	}
	var r SourceRanges
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
			r.all[f] = true
			continue
		}
		r.byFamily[f] = append(r.byFamily[f], p)
	}
	return r
}

// Of returns the ranges of one family (IPv6 when is6) and whether that family's
// load-balancer traffic is filtered: a Service with source ranges filters every family
// unless a range covers all of it, so a family without ranges of its own admits no one.
func (r SourceRanges) Of(is6 bool) ([]netip.Prefix, bool) {
	f := b2i(is6)
	if !r.Set || r.all[f] {
		return nil, false
	}
	return r.byFamily[f], true
}

// ContainsAny reports whether a range holds one of the addresses (IPv4-mapped ones as IPv4).
func ContainsAny(ps []netip.Prefix, addrs []netip.Addr) bool {
	for _, p := range ps {
		for _, a := range addrs {
			if p.Contains(a.Unmap()) {
				return true
			}
		}
	}
	return false
}

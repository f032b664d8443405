package proxy

import (
	"fmt"
	"net/netip"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-ipvs/kube-ipvs/model"
)

func TestSourceRangesOf(t *testing.T) {
	withRanges := func(field []string, ann string) *v1.Service {
		s := &v1.Service{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{}}}
		s.Spec.LoadBalancerSourceRanges = field
		if ann != "" {
			s.Annotations[AnnotationSourceRanges] = ann
		}
		return s
	}
	for _, c := range []struct {
		name   string
		svc    *v1.Service
		v4, v6 string // fmt of Of(false), Of(true)
		set    bool
	}{
		{"none", withRanges(nil, ""), "[] false", "[] false", false},
		{"field, masked, deduplicated, mapped as IPv4", withRanges([]string{" 198.51.100.7/24", "198.51.100.0/24", "::ffff:203.0.113.0/120"}, ""),
			"[198.51.100.0/24 203.0.113.0/24] true", "[] true", true},
		{"a short IPv4-mapped range stays IPv6", withRanges([]string{"::ffff:0:0/90"}, ""), "[] true", "[::ffc0:0:0/90] true", true},
		{"annotation only when the field is empty", withRanges(nil, "10.0.0.0/8, fd00::/8"), "[10.0.0.0/8] true", "[fd00::/8] true", true},
		{"field wins over the annotation", withRanges([]string{"10.0.0.0/8"}, "192.0.2.0/24"), "[10.0.0.0/8] true", "[] true", true},
		{"a whole family is not filtered", withRanges([]string{"0.0.0.0/0", "fd00::/8"}, ""), "[] false", "[fd00::/8] true", true},
		{"nothing parses: filtered, no one admitted", withRanges([]string{"bogus"}, ""), "[] true", "[] true", true},
	} {
		r := SourceRangesOf(c.svc)
		p4, f4 := r.Of(false)
		p6, f6 := r.Of(true)
		if got := fmt.Sprint(p4, " ", f4); got != c.v4 || fmt.Sprint(p6, " ", f6) != c.v6 || r.Set != c.set {
			t.Errorf("%s: IPv4 %s, IPv6 %v %v, set %v; want %s, %s, %v", c.name, got, p6, f6, r.Set, c.v4, c.v6, c.set)
		}
	}
	if !model.ContainsAny([]netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, []netip.Addr{netip.MustParseAddr("::ffff:10.1.2.3")}) {
		t.Error("ContainsAny misses an IPv4-mapped address")
	}
}

package main

import (
	"net/netip"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// NodeCIDR mode uses the first pod CIDR of each family, as kube-proxy does.
func TestPodCIDRsOf(t *testing.T) {
	for _, tc := range []struct {
		spec corev1.NodeSpec
		want []string
	}{
		{corev1.NodeSpec{PodCIDRs: []string{"10.244.1.0/24", "fd00:10:244:1::/64", "10.245.1.0/24"}}, []string{"10.244.1.0/24", "fd00:10:244:1::/64"}},
		{corev1.NodeSpec{PodCIDR: "10.244.1.7/24"}, []string{"10.244.1.0/24"}},
		{corev1.NodeSpec{PodCIDRs: []string{"bogus", "10.244.2.0/24"}}, []string{"10.244.2.0/24"}},
		{corev1.NodeSpec{}, nil},
	} {
		var want []netip.Prefix
		for _, s := range tc.want {
			want = append(want, netip.MustParsePrefix(s))
		}
		if got := podCIDRsOf(&corev1.Node{Spec: tc.spec}); !slices.Equal(got, want) {
			t.Errorf("%+v: %v, want %v", tc.spec, got, want)
		}
	}
}

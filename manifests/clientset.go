package manifests

import (
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// NewClientset returns the clientset Sync fills: client-go's fake one, whose discovery also
// lists the ServiceCIDR resource, as a Kubernetes 1.33 API server does, so that the proxy
// watches ServiceCIDR objects from manifests exactly as from a cluster (none: --service-cidr).
//
// It is the fake with the plain object tracker (NewSimpleClientset), not NewClientset's
// field-managed one: server-side-apply bookkeeping costs about 3,000 allocations and 1 MiB per
// object written (2,000 Services with their EndpointSlices took 14.5 s on the host and about
// 3.5 minutes under emulation, against 58 ms here), and the proxy never reads managedFields.
// The informers see the same List and Watch either way.
func NewClientset() *fake.Clientset {
	cs := fake.NewSimpleClientset()
	cs.Resources = append(cs.Resources, &metav1.APIResourceList{
		GroupVersion: networkingv1.SchemeGroupVersion.String(),
		APIResources: []metav1.APIResource{{Name: "servicecidrs", Kind: "ServiceCIDR", Verbs: []string{"list", "watch"}}},
	})
	return cs
}

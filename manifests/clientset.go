package manifests

import (
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// NewClientset returns the clientset Sync fills: client-go's fake one, whose discovery also
// lists the ServiceCIDR resource, as a Kubernetes 1.33 API server does, so that the proxy
// watches ServiceCIDR objects from manifests exactly as from a cluster (none: --service-cidr).
func NewClientset() *fake.Clientset {
	cs := fake.NewClientset()
	cs.Resources = append(cs.Resources, &metav1.APIResourceList{
		GroupVersion: networkingv1.SchemeGroupVersion.String(),
		APIResources: []metav1.APIResource{{Name: "servicecidrs", Kind: "ServiceCIDR", Verbs: []string{"list", "watch"}}},
	})
	return cs
}

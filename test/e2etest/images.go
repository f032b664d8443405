package e2etest

import (
	"fmt"
	"sort"

	imageutils "k8s.io/kubernetes/test/utils/image"
)

// Images are the images hack/conformance/build.sh builds, by the name of their archive
// (NAME-amd64.tar) and package list (hack/conformance/packages/NAME.txt), each with the id under
// which the suite's image manifest (k8s.io/kubernetes/test/utils/image/manifest.go) names it.
var Images = map[string]imageutils.ImageID{
	"agnhost":             imageutils.Agnhost,            // most [sig-network] pods and exec pods
	"busybox":             imageutils.BusyBox,            // conntrack specs, e2epod's default image
	"pause":               imageutils.Pause,              // the suite's pause pods
	"nginx":               imageutils.Nginx,              // Endpoints and EndpointSlice conformance specs
	"glibc-dns-testing":   imageutils.GlibcDnsTesting,    // the DNS specs' glibc prober
	"distroless-iptables": imageutils.DistrolessIptables, // KubeProxy's CLOSE_WAIT spec
	// Conntrack's invalid-state spec: its boom-server sends a packet outside the TCP window.
	"regression-issue-74839": imageutils.RegressionIssue74839,
}

// Ref is the reference the suite's pods ask for the image of that name
// (registry.k8s.io/e2e-test-images/agnhost:2.66.1), from the manifest with its default
// registries (hack/conformance/build.sh clears KUBE_TEST_REPO_LIST and KUBE_TEST_REPO).
func Ref(name string) (string, error) {
	id, ok := Images[name]
	if !ok {
		return "", fmt.Errorf("no image %q", name)
	}
	return imageutils.GetE2EImage(id), nil
}

// Names are the images' names, sorted.
func Names() []string {
	names := make([]string, 0, len(Images))
	for n := range Images {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

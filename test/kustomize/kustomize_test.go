// Package kustomize builds deploy/ with kustomize's own library (sigs.k8s.io/kustomize/api,
// what `kubectl kustomize` runs), so the check needs no kubectl on the machine. It is a Go
// module of its own to keep kustomize out of the product's go.mod.
package kustomize

import (
	"strings"
	"testing"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// deploy/ builds, every namespaced object lands in kube-system (the kustomization's namespace), and the
// image the kustomization names replaces the DaemonSet's in both its containers.
func TestDeployBuilds(t *testing.T) {
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	res, err := k.Run(filesys.MakeFsOnDisk(), "../../deploy")
	if err != nil {
		t.Fatalf("kustomize build deploy/: %v", err)
	}
	kinds := map[string]int{}
	for _, r := range res.Resources() {
		kinds[r.GetKind()]++
		switch r.GetKind() {
		case "ClusterRole", "ClusterRoleBinding", "Namespace":
		default:
			if r.GetNamespace() != "kube-system" {
				t.Errorf("%s %s is in namespace %q", r.GetKind(), r.GetName(), r.GetNamespace())
			}
		}
	}
	for _, kind := range []string{"DaemonSet", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "ConfigMap"} {
		if kinds[kind] == 0 {
			t.Errorf("no %s in the build (got %v)", kind, kinds)
		}
	}
	out, err := res.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	images := map[string]int{}
	for _, line := range strings.Split(string(out), "\n") {
		if s := strings.TrimSpace(line); strings.HasPrefix(s, "image: ") {
			images[strings.TrimPrefix(s, "image: ")]++
		}
	}
	if len(images) != 1 {
		t.Fatalf("images in the build %v; want one image for every container", images)
	}
	for image, n := range images {
		if !strings.Contains(image, "kube-ipvs:") || strings.HasSuffix(image, ":latest") || n != 2 {
			t.Errorf("image %q used %d times; want the kustomization's tagged kube-ipvs image in the init and the proxy containers", image, n)
		}
	}
}

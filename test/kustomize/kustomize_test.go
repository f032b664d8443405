// Package kustomize builds deploy/ with kustomize's own library (sigs.k8s.io/kustomize/api,
// what `kubectl kustomize` runs), so the check needs no kubectl on the machine. It is a Go
// module of its own to keep kustomize out of the product's go.mod.
package kustomize

import (
	"fmt"
	"os"
	"path/filepath"
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

// deploy/ with the deploy/migrate Component added (as `kustomize edit add component
// migrate` does) builds, and its DaemonSet has `kube-ipvs run` given --cleanup-kube-proxy
// once, in the proxy container, and no init container besides --init-only: kube-proxy's
// leftovers go after the proxy's first sync, never before it.
func TestMigrateComponentBuilds(t *testing.T) {
	fs := filesys.MakeFsInMemory()
	for _, f := range []string{"kustomization.yaml", "rbac.yaml", "configmap.yaml", "daemonset.yaml", "migrate/kustomization.yaml", "migrate/cleanup-kube-proxy.yaml"} {
		data, err := os.ReadFile(filepath.Join("../../deploy", f))
		if err != nil {
			t.Fatal(err)
		}
		if f == "kustomization.yaml" {
			if strings.Contains(string(data), "components:") {
				t.Fatal("deploy/kustomization.yaml already lists components; the base must not enable migrate")
			}
			data = append(data, "components:\n  - migrate\n"...)
		}
		if err := fs.WriteFile(filepath.Join("/deploy", f), data); err != nil {
			t.Fatal(err)
		}
	}
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	res, err := k.Run(fs, "/deploy")
	if err != nil {
		t.Fatalf("kustomize build deploy/ with components [migrate]: %v", err)
	}
	var found bool
	for _, r := range res.Resources() {
		if r.GetKind() != "DaemonSet" {
			continue
		}
		found = true
		m, err := r.Map()
		if err != nil {
			t.Fatal(err)
		}
		spec := dig(t, m, "spec", "template", "spec")
		var inits []string
		for _, c := range list(spec["initContainers"]) {
			inits = append(inits, c["name"].(string))
		}
		if strings.Join(inits, " ") != "init" {
			t.Errorf("init containers %v; want the --init-only one only", inits)
		}
		for _, c := range list(spec["containers"]) {
			var args []string
			for _, a := range c["args"].([]any) {
				args = append(args, a.(string))
			}
			n := strings.Count(" "+strings.Join(args, " ")+" ", " --cleanup-kube-proxy ")
			switch {
			case c["name"] == "kube-ipvs" && (len(args) == 0 || args[0] != "run" || n != 1):
				t.Errorf("the proxy container runs %q; want run with --cleanup-kube-proxy once", args)
			case c["name"] != "kube-ipvs" && n != 0:
				t.Errorf("container %v got --cleanup-kube-proxy", c["name"])
			}
		}
	}
	if !found {
		t.Fatal("no DaemonSet in the build")
	}
}

func dig(t *testing.T, m map[string]any, keys ...string) map[string]any {
	t.Helper()
	for _, k := range keys {
		next, ok := m[k].(map[string]any)
		if !ok {
			t.Fatalf("no %s in %v", k, keys)
		}
		m = next
	}
	return m
}

func list(v any) []map[string]any {
	var out []map[string]any
	l, _ := v.([]any)
	for _, x := range l {
		if m, ok := x.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}

// buildWithComponents builds deploy/ with the given components added to its kustomization
// (as `kustomize edit add component` does), from an in-memory copy of deploy/.
func buildWithComponents(t *testing.T, components ...string) map[string]any {
	t.Helper()
	fs := filesys.MakeFsInMemory()
	files := []string{"kustomization.yaml", "rbac.yaml", "configmap.yaml", "daemonset.yaml"}
	for _, c := range components {
		entries, err := os.ReadDir(filepath.Join("../../deploy", c))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			files = append(files, filepath.Join(c, e.Name()))
		}
	}
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join("../../deploy", f))
		if err != nil {
			t.Fatal(err)
		}
		if f == "kustomization.yaml" {
			data = append(data, "components:\n"...)
			for _, c := range components {
				data = append(data, "  - "+c+"\n"...)
			}
		}
		if err := fs.WriteFile(filepath.Join("/deploy", f), data); err != nil {
			t.Fatal(err)
		}
	}
	res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(fs, "/deploy")
	if err != nil {
		t.Fatalf("kustomize build deploy/ with components %v: %v", components, err)
	}
	for _, r := range res.Resources() {
		if r.GetKind() == "DaemonSet" {
			m, err := r.Map()
			if err != nil {
				t.Fatal(err)
			}
			return m
		}
	}
	t.Fatal("no DaemonSet in the build")
	return nil
}

// deploy/ with the kube-proxy-compat Component builds, alone and with migrate, and its
// DaemonSet's Pods are what the kube-prometheus mixin's PodMonitor (k8s-app: kube-proxy,
// port 10249) and ClusterLoader2's Service (component: kube-proxy, port 10249) select: both
// labels on the Pods, the selector still kube-ipvs's own, and `kube-ipvs run` serving
// /metrics on the Pod's IP at 10249, which the Pod declares.
func TestKubeProxyCompatComponentBuilds(t *testing.T) {
	for _, components := range [][]string{{"kube-proxy-compat"}, {"migrate", "kube-proxy-compat"}} {
		ds := buildWithComponents(t, components...)
		labels := dig(t, ds, "spec", "template", "metadata", "labels")
		for k, v := range map[string]string{"k8s-app": "kube-proxy", "component": "kube-proxy", "app.kubernetes.io/name": "kube-ipvs"} {
			if labels[k] != v {
				t.Errorf("%v: Pod label %s=%v, want %s", components, k, labels[k], v)
			}
		}
		sel := dig(t, ds, "spec", "selector", "matchLabels")
		if len(sel) != 1 || sel["app.kubernetes.io/name"] != "kube-ipvs" {
			t.Errorf("%v: selector %v; want kube-ipvs's own only (a kube-proxy DaemonSet's would adopt the Pods)", components, sel)
		}
		var proxy map[string]any
		for _, c := range list(dig(t, ds, "spec", "template", "spec")["containers"]) {
			if c["name"] == "kube-ipvs" {
				proxy = c
			}
		}
		if proxy == nil {
			t.Fatalf("%v: no kube-ipvs container", components)
		}
		var args []string
		for _, a := range proxy["args"].([]any) {
			args = append(args, a.(string))
		}
		bind := 0
		for _, a := range args {
			if strings.HasPrefix(a, "--metrics-bind-address") {
				bind++
				if a != "--metrics-bind-address=[$(POD_IP)]:10249" {
					t.Errorf("%v: %s; want the Pod IP at 10249", components, a)
				}
			}
		}
		if bind != 1 || args[0] != "run" {
			t.Errorf("%v: args %q; want run with --metrics-bind-address once", components, args)
		}
		podIP := false
		for _, e := range list(proxy["env"]) {
			if e["name"] == "POD_IP" {
				podIP = dig(t, e, "valueFrom", "fieldRef")["fieldPath"] == "status.podIP"
			}
		}
		if !podIP {
			t.Errorf("%v: no POD_IP from status.podIP in %v", components, proxy["env"])
		}
		port := false
		for _, p := range list(proxy["ports"]) {
			port = port || p["containerPort"] == 10249
		}
		if !port {
			t.Errorf("%v: container ports %v lack 10249", components, proxy["ports"])
		}
	}
}

// make cluster's overlay (hack/cluster/kube-ipvs) builds on deploy/ as shipped and changes only
// what a user sets for a cluster: the image tag, the API server's address keys in the
// ConfigMap and two flags appended to the proxy's args; the rest of the DaemonSet is deploy/'s.
func TestClusterOverlayChangesOnlyUserValues(t *testing.T) {
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	base, err := k.Run(filesys.MakeFsOnDisk(), "../../deploy")
	if err != nil {
		t.Fatal(err)
	}
	over, err := k.Run(filesys.MakeFsOnDisk(), "../../hack/cluster/kube-ipvs")
	if err != nil {
		t.Fatalf("kustomize build hack/cluster/kube-ipvs: %v", err)
	}
	if len(base.Resources()) != len(over.Resources()) {
		t.Fatalf("the overlay has %d objects, deploy/ %d", len(over.Resources()), len(base.Resources()))
	}
	for _, r := range over.Resources() {
		b, err := base.GetById(r.CurId())
		if err != nil {
			t.Fatalf("%s %s is not in deploy/", r.GetKind(), r.GetName())
		}
		bm, _ := b.Map()
		om, _ := r.Map()
		switch r.GetKind() {
		case "ConfigMap":
			data := dig(t, om, "data")
			if data["apiserver-host"] != "10.0.2.100" || data["apiserver-port"] != "6443" {
				t.Errorf("the ConfigMap's API server keys: %v %v", data["apiserver-host"], data["apiserver-port"])
			}
			delete(data, "apiserver-host")
			delete(data, "apiserver-port")
		case "DaemonSet":
			spec := dig(t, om, "spec", "template", "spec")
			proxy := list(spec["containers"])[0]
			args := proxy["args"].([]any)
			tail := args[len(args)-2:]
			if tail[0] != "--cluster-cidr=10.244.0.0/16" || tail[1] != "--metrics-bind-address=0.0.0.0:10249" {
				t.Errorf("the proxy's args end with %v", tail)
			}
			proxy["args"] = args[:len(args)-2]
			for _, c := range append(list(spec["initContainers"]), proxy) {
				if c["image"] != "kube-ipvs:cluster" {
					t.Errorf("container %v runs %v, want kube-ipvs:cluster", c["name"], c["image"])
				}
				c["image"] = "kube-ipvs:TAG"
			}
		}
		if fmt.Sprint(om) != fmt.Sprint(bm) {
			t.Errorf("%s %s differs from deploy/'s beyond the user's values:\noverlay: %v\ndeploy/: %v", r.GetKind(), r.GetName(), om, bm)
		}
	}
}

// make conformance PROXY=kube-proxy's manifests (hack/cluster/kube-proxy) build: kubeadm's
// objects, kube-proxy in IPVS mode from the image of the Kubernetes version the cluster's
// binaries are built from (test/apiserver/go.mod), with the API server's real address.
func TestKubeProxyManifests(t *testing.T) {
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	res, err := k.Run(filesys.MakeFsOnDisk(), "../../hack/cluster/kube-proxy")
	if err != nil {
		t.Fatalf("kustomize build hack/cluster/kube-proxy: %v", err)
	}
	mod, err := os.ReadFile("../apiserver/go.mod")
	if err != nil {
		t.Fatal(err)
	}
	version := ""
	for _, l := range strings.Split(string(mod), "\n") {
		if f := strings.Fields(l); len(f) == 2 && f[0] == "k8s.io/kubernetes" {
			version = f[1]
		}
	}
	kinds := map[string]int{}
	for _, r := range res.Resources() {
		kinds[r.GetKind()]++
		m, _ := r.Map()
		switch r.GetKind() {
		case "ConfigMap":
			data := dig(t, m, "data")
			conf, _ := data["config.conf"].(string)
			for _, want := range []string{"mode: ipvs", "clusterCIDR: 10.244.0.0/16", "kubeconfig: /var/lib/kube-proxy/kubeconfig.conf"} {
				if !strings.Contains(conf, want) {
					t.Errorf("config.conf lacks %q:\n%s", want, conf)
				}
			}
			if kc, _ := data["kubeconfig.conf"].(string); !strings.Contains(kc, "server: https://10.0.2.100:6443") {
				t.Errorf("kubeconfig.conf does not name the API server's real address:\n%s", kc)
			}
		case "DaemonSet":
			c := list(dig(t, m, "spec", "template", "spec")["containers"])[0]
			if want := "registry.k8s.io/kube-proxy:" + version; c["image"] != want {
				t.Errorf("the DaemonSet runs %v, want %s", c["image"], want)
			}
		}
	}
	for _, kind := range []string{"DaemonSet", "ServiceAccount", "ClusterRoleBinding", "ConfigMap"} {
		if kinds[kind] != 1 {
			t.Errorf("want one %s, got %v", kind, kinds)
		}
	}
}
